package readme

import (
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	md := "intro\n\n" +
		"<!-- not run by TestReadme: it needs a kernel -->\n" +
		"```sh\nmount x\n```\n\n" +
		"```sh\nB=bin/basin\n# a comment line\n$B volumes create v --pool p \\\n    --export-rule clients=10.0.0.0/8   # a comment\n" +
		"$B --key-file k.json pools create p2 --capacity-gib 8   # 403: names the permission\n" +
		"$B pools create p3 ...     # fill in\n" +
		"echo 'a # not a comment' \"# nor this\"\n```\n\n" +
		"<!-- not run by TestReadme: stale -->\n\ntext between\n\n```python\nprint(1)\n```\n"
	blocks, err := Parse(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || blocks[0].Skip != "it needs a kernel" || blocks[1].Skip != "" || blocks[2].Skip != "" || blocks[2].Lang != "python" || blocks[2].Text != "print(1)\n" {
		t.Fatalf("blocks: %+v", blocks)
	}
	want := []Command{
		{Line: 9, Text: "B=bin/basin"},
		{Line: 11, Text: "$B volumes create v --pool p  --export-rule clients=10.0.0.0/8"},
		{Line: 13, Text: "$B --key-file k.json pools create p2 --capacity-gib 8", Refused: 403},
		{Line: 14, Text: "$B pools create p3 ...", Template: true},
		{Line: 15, Text: `echo 'a # not a comment' "# nor this"`},
	}
	got := blocks[1].Commands
	if len(got) != len(want) {
		t.Fatalf("commands: %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("command %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"<!-- not run by TestReadme: -->\n```sh\nx\n```\n", "```sh\nnever closed\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Basin's README: every block is shell or Python, and every block not run says
// why; templates ("...") are few.
func TestBasinReadme(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	run, templates := 0, 0
	for _, b := range blocks {
		if b.Lang != "sh" && b.Lang != "python" {
			t.Errorf("line %d: a %q block: TestReadme runs only sh and python", b.Line, b.Lang)
		}
		if b.Skip != "" {
			continue
		}
		for _, c := range b.Commands {
			if c.Template {
				templates++
				t.Errorf("line %d: template %q in a block that runs: move it to a block not run, saying why", c.Line, c.Text)
			} else {
				run++
			}
		}
	}
	if run < 25 {
		t.Errorf("only %d commands run", run)
	}
	t.Logf("%d blocks, %d commands run, %d templates", len(blocks), run, templates)
	for _, b := range blocks {
		if b.Skip != "" {
			t.Logf("line %d not run: %s", b.Line, strings.TrimSpace(b.Skip))
		}
	}
}
