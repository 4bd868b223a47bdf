// Command protodeps writes the FileDescriptorSet protoc reads, with
// --descriptor_set_in, for the .proto files that proto/ imports but does not
// hold: google/longrunning/operations.proto and what it imports. The
// descriptors come from the Go packages Basin links (longrunningpb and its
// dependencies, at the versions go.mod pins), so the generated netapppb code
// refers to those packages' types instead of generating its own copies, which
// would collide in the protobuf registry with the official ones. It is run by
// gen.sh only, at generation time.
package main

import (
	"fmt"
	"os"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: protodeps OUT.binpb")
		os.Exit(2)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	// Dependencies first: protoc wants a file's imports before it.
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(longrunningpb.File_google_longrunning_operations_proto)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		fmt.Fprintln(os.Stderr, "protodeps:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "protodeps:", err)
		os.Exit(1)
	}
}
