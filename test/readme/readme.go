// Package readme reads the examples out of a Markdown file (Basin's README.md) so
// that a test can run them as written: test/e2e's TestReadme runs every ```sh and
// ```python block against a fresh server.
//
// The conventions it reads, kept few and explicit:
//   - a block right after a line `<!-- not run by TestReadme: REASON -->` is not
//     run, and REASON must say why;
//   - a shell line containing "..." is a template to fill in, not run;
//   - a shell command whose trailing comment starts with an HTTP status of 400 or
//     more (`# 403: …`) is expected to be refused: to exit non-zero, printing it.
//
// Shell lines ending in a backslash continue on the next line; comment lines and
// blank lines are dropped.
package readme

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	Lang string // the fence's info string: sh, python, …
	Line int    // of the opening fence, from 1
	Text string
	// Skip is the reason given for not running it ("" = run it).
	Skip string
	// Commands are a shell block's commands.
	Commands []Command
}

// Command is one shell command (continuation lines joined).
type Command struct {
	Line int // where it starts, from 1
	Text string
	// Template: it holds "..." for the reader to fill in; not run.
	Template bool
	// Refused is the HTTP status its trailing comment says it gets, or 0.
	Refused int
}

var (
	skipRE    = regexp.MustCompile(`^<!--\s*not run by TestReadme:\s*(.*?)\s*-->$`)
	refusedRE = regexp.MustCompile(`^#\s*([45]\d\d)\b`)
)

// Parse returns md's fenced blocks.
func Parse(md string) ([]Block, error) {
	lines := strings.Split(md, "\n")
	var blocks []Block
	skip := ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t\r")
		if m := skipRE.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				return nil, fmt.Errorf("line %d: a block not run needs a reason", i+1)
			}
			skip = m[1]
			continue
		}
		if !strings.HasPrefix(line, "```") {
			if line != "" {
				skip = "" // a skip comment applies to the block right after it
			}
			continue
		}
		b := Block{Lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), Line: i + 1, Skip: skip}
		skip = ""
		var body []string
		for i++; i < len(lines) && strings.TrimRight(lines[i], " \t\r") != "```"; i++ {
			body = append(body, strings.TrimRight(lines[i], "\r"))
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: block never closed", b.Line)
		}
		b.Text = strings.Join(body, "\n") + "\n"
		if b.Lang == "sh" || b.Lang == "bash" || b.Lang == "shell" {
			b.Commands = commands(body, b.Line+1)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// commands splits a shell block into commands; first is the line number of
// body[0].
func commands(body []string, first int) []Command {
	var out []Command
	var cur *Command
	for n, line := range body {
		trimmed := strings.TrimSpace(line)
		if cur == nil {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			out = append(out, Command{Line: first + n})
			cur = &out[len(out)-1]
		}
		code, comment := splitComment(trimmed)
		if cont, ok := strings.CutSuffix(code, "\\"); ok && comment == "" {
			cur.Text += cont + " "
			continue
		}
		cur.Text += code
		if m := refusedRE.FindStringSubmatch(comment); m != nil {
			cur.Refused, _ = strconv.Atoi(m[1])
		}
		finish(cur)
		cur = nil
	}
	if cur != nil { // the block ended on a continuation
		finish(cur)
	}
	return out
}

func finish(c *Command) {
	c.Text = strings.TrimSpace(c.Text)
	c.Template = strings.Contains(c.Text, "...")
}

// splitComment cuts a shell line at a comment: a # outside quotes that starts a
// word.
func splitComment(line string) (code, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t"), line[i:]
		}
	}
	return line, ""
}
