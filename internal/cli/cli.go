// Package cli implements Basin's command-line client: `basin pools|volumes|snapshots|
// operations|locations|settings|iam|audit|top …`. It talks to a Basin server only
// through the REST API (package client), authenticating with a service-account key
// file.
//
// Flags may be written --flag=value or --flag value and may come before, between or
// after positional arguments; global flags (--project, --key-file, -o …) may also
// come before the command. Wherever a command takes an ID it also takes the
// resource's full name, as the API and -o yaml print it (names.go).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
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

// flagSpec declares a flag: bool flags take no value; multi flags may repeat;
// short is a one-letter alias (-o for --output). One-letter names and aliases are
// written with one dash, the others with two; either form is accepted.
type flagSpec struct {
	name  string
	short string
	bool  bool
	multi bool
	usage string
	// value names the flag's value in help (default: the name's last word).
	value string
}

// dashed is how help writes a flag name: -n, --name.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// display is a flag as help lists it: "-o, --output FORMAT".
func (f flagSpec) display() string {
	d := dashed(f.name)
	if f.short != "" {
		d = dashed(f.short) + ", " + d
	}
	if f.bool {
		return d
	}
	v := f.value
	if v == "" {
		v = strings.ToUpper(f.name[strings.LastIndex(f.name, "-")+1:])
	}
	return d + " " + v
}

// usageError is a command line that cannot be run as written (exit status 2);
// run names the command in it.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
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

// flagIndex maps flag names and short aliases to their specs.
func flagIndex(specs []flagSpec) map[string]flagSpec {
	byName := map[string]flagSpec{}
	for _, s := range specs {
		byName[s.name] = s
		if s.short != "" {
			byName[s.short] = s
		}
	}
	return byName
}

// parseArgs splits args by specs; unknown flags are errors. A short alias is
// recorded under the flag's name.
func parseArgs(args []string, specs []flagSpec) (*parsed, error) {
	byName := flagIndex(specs)
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
			return nil, usagef("unknown flag %s", dashed(name))
		}
		if spec.bool {
			if !hasVal {
				val = "true"
			}
			if val != "true" && val != "false" {
				return nil, usagef("%s takes true or false, got %q", dashed(name), val)
			}
		} else if !hasVal {
			if i+1 >= len(args) {
				return nil, usagef("%s needs a value", dashed(name))
			}
			i++
			val = args[i]
		}
		if spec.multi {
			p.flags[spec.name] = append(p.flags[spec.name], val)
		} else {
			p.flags[spec.name] = []string{val}
		}
	}
	return p, nil
}

var globalFlags = []flagSpec{
	{name: "endpoint", usage: "Basin API URL (env BASIN_ENDPOINT; default: the server of the key file's token_uri, else http://127.0.0.1:8780)"},
	{name: "key-file", usage: "service-account key file (env BASIN_KEY_FILE; default <data-dir>/owner-key.json)"},
	{name: "data-dir", usage: "where to find owner-key.json (env BASIN_DATA_DIR; default /var/lib/basin)"},
	{name: "project", usage: "project ID (env BASIN_PROJECT; default \"default\")"},
	{name: "location", usage: "location ID (env BASIN_LOCATION; default \"local\")"},
	{name: "output", short: "o", value: "FORMAT", usage: "table, json or yaml (env BASIN_OUTPUT; default table)"},
	{name: "async", bool: true, usage: "print the operation instead of waiting for it"},
	{name: "insecure-no-auth", bool: true, usage: "send no credentials (server started with --insecure-no-auth)"},
	{name: "help", short: "h", bool: true, usage: "show help"},
}

// globalsFor are the global flags a command uses: those reaching the server
// (not for offline commands, except to look something up; --location only for
// what lives in a location), --async for those that start an operation, and
// --help.
func globalsFor(c *command) []flagSpec {
	projectLevel := strings.HasPrefix(c.group, "iam ") || c.group == "audit" || c.group == "locations" || c.group == "nodes"
	var out []flagSpec
	for _, f := range globalFlags {
		switch {
		case f.name == "help":
		case f.name == "async" && !c.mutating:
			continue
		case f.name == "location" && projectLevel:
			continue
		case c.offline && !c.lookup:
			continue
		case c.offline && f.name == "output":
			continue
		}
		out = append(out, f)
	}
	return out
}

// command is one CLI command.
type command struct {
	group, verb string
	args        string // positional usage
	flags       []flagSpec
	help        string
	// offline commands need no server, so no key file either.
	offline bool
	// lookup: an offline command that may look something up on the server.
	lookup bool
	// mutating commands start an operation and wait for it unless --async.
	mutating bool
	// live commands run until interrupted, without the 30-minute limit.
	live bool
	run  func(ctx context.Context, c *session, p *parsed) error
}

// session is what a command needs: the client, scope and output.
type session struct {
	env      Env
	cl       apiClient
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
		// A command's errors read "basin COMMAND: …", as basin serve's do.
		var ce *commandError
		if errors.As(err, &ce) {
			fmt.Fprintln(env.Stderr, "basin "+err.Error())
		} else {
			fmt.Fprintln(env.Stderr, "basin:", err)
		}
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
	// Global flags may come before the command: they are set aside and parsed
	// with the command's own.
	globals := flagIndex(globalFlags)
	var pre []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" && args[0] != "--" {
		name, _, hasVal := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		spec, ok := globals[name]
		if !ok {
			return usagef("unknown flag %s before the command: only global flags may come first (basin help lists them)", dashed(name))
		}
		n := 1
		if !spec.bool && !hasVal && len(args) > 1 {
			n = 2
		}
		pre, args = append(pre, args[:n]...), args[n:]
	}
	if len(args) == 0 || args[0] == "help" {
		if len(args) > 1 { // basin help volumes [create]
			return run(append(args[1:], "--help"), env)
		}
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
		return usagef("unknown command %q (basin help lists them)", args[0])
	}
	// The verb is the first argument after the group that is neither a flag nor
	// a global flag's value (some commands, like advise, have none).
	rest := append(pre, args[1:]...)
	var cmd, bare *command
	for _, c := range verbs {
		if c.verb == "" {
			bare = c
		}
	}
	verbIdx := firstArg(rest, globals)
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
		return usagef("unknown command %q %q", group, rest[verbIdx])
	}
	err := runCommand(cmd, rest, env)
	if err == nil {
		return nil
	}
	name := strings.TrimSpace(cmd.group + " " + cmd.verb)
	var ue *usageError
	if errors.As(err, &ue) {
		err = fmt.Errorf("%w (basin %s --help)", err, name)
	}
	return &commandError{name, err}
}

// commandError is an error of the command name ("volumes metrics"), which Main
// writes as "basin volumes metrics: …".
type commandError struct {
	name string
	err  error
}

func (e *commandError) Error() string { return e.name + ": " + e.err.Error() }
func (e *commandError) Unwrap() error { return e.err }

// firstArg is the index of the first positional argument of args, skipping flags
// and the values of the value-taking flags in specs; -1 if there is none.
func firstArg(args []string, specs map[string]flagSpec) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return i + 1
			}
			return -1
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return i
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if spec, ok := specs[name]; ok && !spec.bool && !hasVal {
			i++
		}
	}
	return -1
}

// runCommand parses a command's arguments and runs it.
func runCommand(cmd *command, args []string, env Env) error {
	p, err := parseArgs(args, append(slices.Clone(globalFlags), cmd.flags...))
	if err != nil {
		return err
	}
	if p.has("help") {
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
	if c.output != "table" && c.output != "json" && c.output != "yaml" {
		return nil, usagef("--output must be table, json or yaml, got %q", c.output)
	}
	c.connect = func() error { return c.dial(env, p, pick) }
	if connect {
		// A client that cannot be made (no key file) fails the first call, so
		// that a command line's own mistakes are reported first.
		if err := c.connect(); err != nil {
			c.cl = unreachable{err}
		}
	}
	return c, nil
}

// apiClient is what commands need of the API client.
type apiClient interface {
	Do(ctx context.Context, method, path string, query url.Values, body, out any) error
	Wait(ctx context.Context, op client.Object) (client.Object, error)
}

// unreachable stands for a client that could not be made.
type unreachable struct{ err error }

func (u unreachable) Do(context.Context, string, string, url.Values, any, any) error { return u.err }
func (u unreachable) Wait(_ context.Context, op client.Object) (client.Object, error) {
	return op, u.err
}

// defaultEndpoint is the API's URL when neither --endpoint, BASIN_ENDPOINT
// nor the key file names one: basin serve's default --listen.
const defaultEndpoint = "http://127.0.0.1:8780"

// dial makes the session's API client. The endpoint is --endpoint's, else
// BASIN_ENDPOINT's, else the server of the key file's token_uri (the owner's
// names --listen; one made through the API, the address it was made through).
func (c *session) dial(env Env, p *parsed, pick func(flag, envName, def string) string) error {
	keyFile, tokenURI := "", ""
	if !p.has("insecure-no-auth") {
		keyFile = pick("key-file", "BASIN_KEY_FILE", "")
		if keyFile == "" {
			keyFile = pick("data-dir", "BASIN_DATA_DIR", "/var/lib/basin") + "/owner-key.json"
		}
		data, err := os.ReadFile(keyFile)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no key file at %s: name one with --key-file or BASIN_KEY_FILE, or the server's data directory "+
				"(where basin serve writes owner-key.json) with --data-dir or BASIN_DATA_DIR", keyFile)
		}
		if err != nil {
			return fmt.Errorf("key file: %w", err)
		}
		var kf struct {
			TokenURI string `json:"token_uri"`
		}
		if json.Unmarshal(data, &kf) == nil {
			tokenURI = kf.TokenURI
		}
	}
	c.endpoint = pick("endpoint", "BASIN_ENDPOINT", endpointOf(tokenURI))
	cl, err := client.New(c.endpoint, keyFile)
	if err != nil {
		return err
	}
	c.cl = cl
	return nil
}

// endpointOf is the API URL of the server a key file's token_uri names (its
// scheme and host; an unspecified address, from --listen 0.0.0.0:PORT, as
// loopback), or defaultEndpoint if it names none or Google's.
func endpointOf(tokenURI string) string {
	u, err := url.Parse(tokenURI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" && u.Hostname() == "" || u.Host == "oauth2.googleapis.com" {
		return defaultEndpoint
	}
	host := u.Hostname()
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	if u.Port() != "" {
		host = net.JoinHostPort(host, u.Port())
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host
}

func usage(w io.Writer, cmds []*command) {
	fmt.Fprintln(w, "Usage: basin [global flags] <command> [arguments] [flags]")
	fmt.Fprintln(w, "\nServer:\n  serve                 run the Basin service (basin serve --help)")
	fmt.Fprintln(w, "\nClient commands (basin help COMMAND, or COMMAND --help, for their flags):")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-44s %s\n", strings.Join(strings.Fields(c.group+" "+c.verb+" "+c.args), " "), c.help)
	}
	fmt.Fprintln(w, "\nGlobal flags (before or after the command):")
	writeFlags(w, globalFlags)
	fmt.Fprintln(w, "\nWherever a command takes an ID it also takes the resource's full name, as")
	fmt.Fprintln(w, "printed by -o yaml or --async (projects/P/locations/L/volumes/V); a snapshot")
	fmt.Fprintln(w, "may also be given as VOLUME/SNAPSHOT.")
}

func groupUsage(w io.Writer, group string, cmds []*command) {
	fmt.Fprintf(w, "Usage: basin %s <verb> [arguments] [flags]\n\n", group)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-40s %s\n", strings.TrimSpace(c.verb+" "+c.args), c.help)
	}
}

func commandUsage(w io.Writer, c *command) {
	line := strings.Join(strings.Fields("basin "+c.group+" "+c.verb+" "+c.args), " ")
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", line, c.help)
	if len(c.flags) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		writeFlags(w, c.flags)
	}
	if g := globalsFor(c); len(g) > 0 {
		fmt.Fprintln(w, "\nGlobal flags:")
		writeFlags(w, g)
	}
}

func writeFlags(w io.Writer, flags []flagSpec) {
	for _, f := range flags {
		fmt.Fprintf(w, "  %-28s %s\n", f.display(), f.usage)
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
				vals[i] = shown(col, cell(row, col))
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t"))
		}
	case client.Object:
		var rows [][2]string
		flatten("", t, &rows)
		for _, r := range rows {
			fmt.Fprintf(tw, "%s:\t%s\n", r[0], shown(r[0], r[1]))
		}
	}
	return nil
}

// flatten lists a resource's fields as a table shows them, sorted by name:
// nested objects as parent.child, items of a list of objects as list[i].field,
// a list of plain values as one comma-separated field. Empty objects and lists
// are left out.
func flatten(prefix string, v any, rows *[][2]string) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			flatten(name, t[k], rows)
		}
	case []any:
		if !slices.ContainsFunc(t, isNested) {
			if len(t) > 0 {
				*rows = append(*rows, [2]string{prefix, compact(t)})
			}
			return
		}
		for i, x := range t {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), x, rows)
		}
	default:
		*rows = append(*rows, [2]string{prefix, compact(v)})
	}
}

func isNested(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}

// shown is how a table shows the value of field (a dotted path): as cell
// formats it, except a volume's usedGib of 1. The API rounds usedGib up to
// whole GiB (docs/api.md), so 1 is anything from a byte to a GiB, an empty
// volume too; a table says "≤1" rather than a figure it does not know. JSON
// and YAML keep the API's value.
func shown(field, val string) string {
	if (field == "usedGib" || strings.HasSuffix(field, ".usedGib")) && val == "1" {
		return "≤1"
	}
	return val
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
	return compact(cur)
}

// compact writes a value on one line: numbers as written (no exponent), lists
// comma-separated, objects as key=value pairs; a list of objects separates
// them with "; ".
func compact(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case []any:
		sep := ","
		if slices.ContainsFunc(t, isNested) {
			sep = "; "
		}
		parts := make([]string, len(t))
		for i, x := range t {
			parts[i] = compact(x)
		}
		return strings.Join(parts, sep)
	case map[string]any:
		parts := make([]string, 0, len(t))
		for _, k := range slices.Sorted(maps.Keys(t)) {
			val := compact(t[k])
			if isNested(t[k]) {
				val = "{" + val + "}"
			}
			parts = append(parts, k+"="+val)
		}
		return strings.Join(parts, " ")
	default:
		return fmt.Sprint(t)
	}
}
