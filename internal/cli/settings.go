package cli

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/basin-nas/basin/internal/client"
)

// settingsCommands are `basin settings …`: the project's Basin-only settings in a
// location (its throughput cap). A change applies at once, with no operation.
func settingsCommands() []*command {
	path := func(c *session) string { return c.parent() + "/settings" }
	return []*command{
		{group: "settings", verb: "get", help: "show the project's settings in the location (throughput cap)", run: func(ctx context.Context, c *session, p *parsed) error {
			if err := needArgs(p); err != nil {
				return err
			}
			var out client.Object
			if err := c.cl.Do(ctx, http.MethodGet, path(c), nil, nil, &out); err != nil {
				return err
			}
			return c.print(out, nil)
		}},
		{group: "settings", verb: "update", flags: []flagSpec{{name: "throughput-cap-mibps", usage: "throughput cap in MiB/s all the project's volumes in the location share (0: the server default)"}},
			help: "change the project's settings in the location", run: settingsUpdate(path)},
	}
}

func settingsUpdate(path func(*session) string) func(context.Context, *session, *parsed) error {
	return func(ctx context.Context, c *session, p *parsed) error {
		if err := needArgs(p); err != nil {
			return err
		}
		body := map[string]any{}
		var mask []string
		if p.has("throughput-cap-mibps") {
			f, err := strconv.ParseFloat(p.str("throughput-cap-mibps"), 64)
			if err != nil {
				return usagef("--throughput-cap-mibps: %q is not a number", p.str("throughput-cap-mibps"))
			}
			body["throughputCapMibps"] = f
			mask = append(mask, "throughputCapMibps")
		}
		if len(mask) == 0 {
			return usagef("nothing to update: give --throughput-cap-mibps")
		}
		var out client.Object
		q := url.Values{"updateMask": {strings.Join(mask, ",")}}
		if err := c.cl.Do(ctx, http.MethodPatch, path(c), q, body, &out); err != nil {
			return err
		}
		return c.print(out, nil)
	}
}
