package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// Local is the file engine: one file per job clone and nrfiles (or one given
// file), laid out to full size before the run, opened with O_DIRECT when asked.
type Local struct {
	Directory string
	Filename  string
}

// Name implements Engine.
func (Local) Name() string { return "local" }

// Open implements Engine. Files go only where the job was pointed: names cannot
// leave the directory.
func (l Local) Open(ctx context.Context, j *Job, n int) ([]File, error) {
	var paths []string
	switch {
	case l.Filename != "":
		paths = []string{l.Filename}
	case l.Directory != "":
		fi, err := os.Stat(l.Directory)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--directory %s is not a directory", l.Directory)
		}
		for i := range j.NrFiles {
			paths = append(paths, filepath.Join(l.Directory, fmt.Sprintf("%s.%d.%d", j.Name, n, i)))
		}
	default:
		return nil, errors.New("the local engine needs --directory or --filename")
	}
	var files []File
	for _, p := range paths {
		if err := layOut(ctx, p, j.Size); err != nil {
			closeAll(files)
			return nil, err
		}
		flags := os.O_RDWR
		if j.Direct {
			flags |= syscall.O_DIRECT
		}
		f, err := os.OpenFile(p, flags, 0o644)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		files = append(files, osFile{f})
	}
	return files, nil
}

func closeAll(fs []File) {
	for _, f := range fs {
		f.Close()
	}
}

// layOut makes path at least size bytes of written (not sparse) data, as fio does.
func layOut(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() >= size {
		return nil
	}
	err = extend(ctx, fi.Size(), size, func(p []byte, off int64) error {
		_, err := f.WriteAt(p, off)
		return err
	})
	if err != nil {
		return fmt.Errorf("lay out %s: %w", path, err)
	}
	return f.Sync()
}

type osFile struct{ f *os.File }

func (o osFile) ReadAt(p []byte, off int64) error {
	n, err := o.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) && n > 0 {
		return nil
	}
	return err
}

func (o osFile) WriteAt(p []byte, off int64) error {
	_, err := o.f.WriteAt(p, off)
	return err
}

func (o osFile) Close() error { return o.f.Close() }

// alignedBuffer returns n bytes aligned to 4096, as O_DIRECT requires.
func alignedBuffer(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	off := (align - int(uintptr(unsafe.Pointer(&b[0]))%align)) % align
	return b[off : off+n]
}
