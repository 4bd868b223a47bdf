package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// A config file (`basin serve --config FILE`) holds `name = value` lines, one
// setting a line: each name is a long flag of basin serve (without the dashes),
// every flag of the set may be given, a repeatable one (location, network) by
// repeating its line. Blank lines and lines whose first non-blank character is
// '#' are ignored; a value may be put in double quotes (`metrics-listen = ""`),
// and is taken as is otherwise, '#' included. Flags on the command line win over
// the file: the file is applied first, the command line over it, and a repeatable
// flag given on the command line replaces the file's values instead of adding to
// them.

// repeatable is a flag value that collects every time it is given.
type repeatable interface {
	flag.Value
	// startOver makes the next Set replace what was collected so far.
	startOver()
}

// configFlag is the name of the flag that names a config file; it cannot be set
// in one.
const configFlag = "config"

// applyConfigFile sets fs's flags from the config file at path.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return applyConfig(fs, path, f)
}

// applyConfig sets fs's flags from a config file's content; name is the file's
// name in errors, which say which line and which setting is at fault.
func applyConfig(fs *flag.FlagSet, name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	seen := map[string]int{} // setting -> line it was first given on
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" {
			return fmt.Errorf("%s:%d: want a `name = value` line, got %q", name, n, line)
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		f := fs.Lookup(key)
		if f == nil {
			return fmt.Errorf("%s:%d: unknown setting %q (the names are basin serve's flags, without dashes: basin serve --help)", name, n, key)
		}
		if key == configFlag {
			return fmt.Errorf("%s:%d: %s cannot be set in a config file", name, n, key)
		}
		_, multi := f.Value.(repeatable)
		if first, dup := seen[key]; dup && !multi {
			return fmt.Errorf("%s:%d: %s is set again (first on line %d); only repeatable settings may be", name, n, key, first)
		}
		seen[key] = n
		if err := fs.Set(key, value); err != nil {
			return fmt.Errorf("%s:%d: %s: invalid value %q: %v", name, n, key, value, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// The command line comes next: a repeatable flag given there replaces the file's.
	fs.VisitAll(func(f *flag.Flag) {
		if r, ok := f.Value.(repeatable); ok {
			r.startOver()
		}
	})
	return nil
}

// configFileArg returns the --config value on a command line that fs has
// parsed, "" if none was given.
func configFileArg(fs *flag.FlagSet) string {
	if f := fs.Lookup(configFlag); f != nil {
		return f.Value.String()
	}
	return ""
}
