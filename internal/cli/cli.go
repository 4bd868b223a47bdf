// Package cli implements Basin's command-line client: `basin pools|volumes|snapshots|
// operations|locations|settings|iam|audit|top …`. It talks to a Basin server only
// through the REST API (package client), authenticating with a service-account key
// file.
//
// Flags may be written --flag=value or --flag value and may come before, between or
// after positional arguments.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/basin-nas/basin/internal/client"
)

// Env carries the process's I/O so tests can run commands in-process.
type Env struct {
	Stdout, Stderr io.Writer
	// Stdin is read by interactive commands (basin top's q); nil = none.
	Stdin  io.Reader
	Getenv func(string) string
	// Now is the clock; nil = time.Now.
	Now func() time.Time
}

// flagSpec declares a flag: bool flags take no value; multi flags may repeat.
type flagSpec struct {
	name  string
	bool  bool
	multi bool
	usage string
}

// parsed holds a command line split into flags and positional arguments.
type parsed struct {
	flags map[string][]string
	args  []string
}

func (p *parsed) str(name string) string {
	if v := p.flags[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func (p *parsed) all(name string) []string { return p.flags[name] }
func (p *parsed) has(name string) bool     { _, ok := p.flags[name]; return ok }

// parseArgs splits args by specs; unknown flags are errors.
func parseArgs(args []string, specs []flagSpec) (*parsed, error) {
	byName := map[string]flagSpec{}
	for _, s := range specs {
		byName[s.name] = s
	}
	p := &parsed{flags: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			p.args = append(p.args, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			p.args = append(p.args, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		spec, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("unknown flag --%s", name)
		}
		if spec.bool {
			if !hasVal {
				val = "true"
			}
			if val != "true" && val != "false" {
				return nil, fmt.Errorf("--%s takes true or false, got %q", name, val)
			}
		} else if !hasVal {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			val = args[i]
		}
		if spec.multi {
			p.flags[name] = append(p.flags[name], val)
		} else {
			p.flags[name] = []string{val}
		}
	}
	return p, nil
}

var globalFlags = []flagSpec{
	{name: "endpoint", usage: "Basin API URL (env BASIN_ENDPOINT; default http://127.0.0.1:8780)"},
	{name: "key-file", usage: "service-account key file (env BASIN_KEY_FILE; default <data-dir>/owner-key.json)"},
	{name: "data-dir", usage: "where to find owner-key.json (default /var/lib/basin)"},
	{name: "project", usage: "project ID (env BASIN_PROJECT; default \"default\")"},
	{name: "location", usage: "location ID (env BASIN_LOCATION; default \"local\")"},
	{name: "output", usage: "table, json or yaml (default table)"},
	{name: "o", usage: "short for --output"},
	{name: "async", bool: true, usage: "print the operation instead of waiting for it"},
	{name: "insecure-no-auth", bool: true, usage: "send no credentials (server started with --insecure-no-auth)"},
	{name: "help", bool: true, usage: "show help"},
	{name: "h", bool: true, usage: "show help"},
}

// command is one CLI command.
type command struct {
	group, verb string
	args        string // positional usage
	flags       []flagSpec
	help        string
	// offline commands need no server, so no key file either.
	offline bool
	// live commands run until interrupted, without the 30-minute limit.
	live bool
	run  func(ctx context.Context, c *session, p *parsed) error
}

// session is what a command needs: the client, scope and output.
type session struct {
	env      Env
	cl       *client.Client
	project  string
	location string
	output   string
	async    bool
	// connect makes cl for offline commands that turn out to need the server.
	connect func() error
	// endpoint is the API's URL cl talks to.
	endpoint string
}

func (c *session) parent() string { return "/v1/projects/" + c.project + "/locations/" + c.location }

// Main runs the CLI with args (without the program name) and returns the exit code.
func Main(args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if err := run(args, env); err != nil {
		fmt.Fprintln(env.Stderr, "basin:", err)
		var ae *client.Error
		if errors.As(err, &ae) {
			return 1
		}
		var oe *client.OperationError
		if errors.As(err, &oe) {
			return 1
		}
		return 2
	}
	return 0
}

func run(args []string, env Env) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
		usage(env.Stdout, cmds)
		return nil
	}
	group := args[0]
	if group == "pool" {
		group = "pools"
	}
	if group == "iam" && len(args) > 1 {
		group, args = "iam "+args[1], append([]string{"iam " + args[1]}, args[2:]...)
	}
	var verbs []*command
	for _, c := range cmds {
		if c.group == group {
			verbs = append(verbs, c)
		}
	}
	if len(verbs) == 0 {
		return fmt.Errorf("unknown command %q (try basin help)", args[0])
	}
	// The verb is the first non-flag argument after the group (some commands, like
	// advise, have none).
	rest := args[1:]
	var cmd, bare *command
	for _, c := range verbs {
		if c.verb == "" {
			bare = c
		}
	}
	verbIdx := slices.IndexFunc(rest, func(s string) bool { return !strings.HasPrefix(s, "-") })
	if verbIdx >= 0 {
		for _, c := range verbs {
			if c.verb != "" && c.verb == rest[verbIdx] {
				cmd = c
				rest = append(slices.Clone(rest[:verbIdx]), rest[verbIdx+1:]...)
				break
			}
		}
	}
	switch {
	case cmd != nil:
	case bare != nil:
		cmd = bare
	case verbIdx < 0:
		groupUsage(env.Stdout, group, verbs)
		return nil
	default:
		groupUsage(env.Stderr, group, verbs)
		return fmt.Errorf("unknown command %q %q", group, rest[verbIdx])
	}
	p, err := parseArgs(rest, append(slices.Clone(globalFlags), cmd.flags...))
	if err != nil {
		return fmt.Errorf("%s %s: %w", group, cmd.verb, err)
	}
	if p.has("help") || p.has("h") {
		commandUsage(env.Stdout, cmd)
		return nil
	}
	c, err := newSession(env, p, !cmd.offline)
	if err != nil {
		return err
	}
	bg, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	if cmd.live {
		bg, cancel = context.WithCancel(context.Background())
	}
	defer cancel()
	return cmd.run(bg, c, p)
}

func newSession(env Env, p *parsed, connect bool) (*session, error) {
	pick := func(flag, envName, def string) string {
		if v := p.str(flag); v != "" {
			return v
		}
		if v := env.Getenv(envName); v != "" {
			return v
		}
		return def
	}
	c := &session{env: env, project: pick("project", "BASIN_PROJECT", "default"), location: pick("location", "BASIN_LOCATION", "local"),
		output: pick("output", "BASIN_OUTPUT", "table"), async: p.has("async")}
	if o := p.str("o"); o != "" {
		c.output = o
	}
	if c.output != "table" && c.output != "json" && c.output != "yaml" {
		return nil, fmt.Errorf("--output must be table, json or yaml, got %q", c.output)
	}
	if !connect {
		c.connect = func() error { return c.dial(env, p, pick) }
		return c, nil
	}
	return c, c.dial(env, p, pick)
}

// dial makes the session's API client.
func (c *session) dial(env Env, p *parsed, pick func(flag, envName, def string) string) error {
	keyFile := ""
	if !p.has("insecure-no-auth") {
		keyFile = pick("key-file", "BASIN_KEY_FILE", "")
		if keyFile == "" {
			keyFile = pick("data-dir", "BASIN_DATA_DIR", "/var/lib/basin") + "/owner-key.json"
		}
	}
	c.endpoint = pick("endpoint", "BASIN_ENDPOINT", "http://127.0.0.1:8780")
	cl, err := client.New(c.endpoint, keyFile)
	if err != nil {
		return err
	}
	c.cl = cl
	return nil
}

func usage(w io.Writer, cmds []*command) {
	fmt.Fprintln(w, "Usage: basin <command> [flags]")
	fmt.Fprintln(w, "\nServer:\n  serve                 run the Basin service (basin serve --help)")
	fmt.Fprintln(w, "\nClient commands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-40s %s\n", c.group+" "+c.verb+" "+c.args, c.help)
	}
	fmt.Fprintln(w, "\nGlobal flags:")
	for _, f := range globalFlags {
		fmt.Fprintf(w, "  --%-20s %s\n", f.name, f.usage)
	}
}

func groupUsage(w io.Writer, group string, cmds []*command) {
	fmt.Fprintf(w, "Usage: basin %s <verb> [flags]\n\n", group)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-40s %s\n", c.verb+" "+c.args, c.help)
	}
}

func commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: basin %s %s %s [flags]\n\n%s\n", c.group, c.verb, c.args, c.help)
	if len(c.flags) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, f := range c.flags {
			fmt.Fprintf(w, "  --%-22s %s\n", f.name, f.usage)
		}
	}
}

// print renders obj (a resource, list or operation) in the chosen output format.
// columns pick and order the table's fields for lists.
func (c *session) print(obj any, columns []string) error {
	switch c.output {
	case "json":
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.env.Stdout, string(b))
		return err
	case "yaml":
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = c.env.Stdout.Write(y)
		return err
	}
	tw := tabwriter.NewWriter(c.env.Stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch t := obj.(type) {
	case []client.Object:
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(columns, "\t")))
		for _, row := range t {
			vals := make([]string, len(columns))
			for i, col := range columns {
				vals[i] = cell(row, col)
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t"))
		}
	case client.Object:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s:\t%s\n", k, cell(t, k))
		}
	}
	return nil
}

// cell formats field (a dotted path; "id" = last segment of name) for a table.
func cell(obj client.Object, field string) string {
	if field == "id" {
		n, _ := obj["name"].(string)
		return n[strings.LastIndex(n, "/")+1:]
	}
	var cur any = obj
	for _, seg := range strings.Split(field, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[seg]
	}
	switch t := cur.(type) {
	case nil:
		return ""
	case string:
		return t
	case []any:
		parts := make([]string, len(t))
		for i, x := range t {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		b, _ := json.Marshal(t)
		return string(b)
	default:
		return fmt.Sprint(t)
	}
}
