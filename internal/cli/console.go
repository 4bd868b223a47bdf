package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

func consoleCommands() []*command {
	return []*command{{group: "console", flags: []flagSpec{
		{name: "url", usage: "the console's address as your browser reaches Basin (default: --endpoint)"},
	}, help: "print a one-time link that signs a browser in to the web console as you (valid 5 minutes, once)", run: consoleLink}}
}

// consoleLink asks Basin for a one-time sign-in link (POST /v1/consoleSignInLinks)
// and prints it. The code is in the link's fragment, which browsers never send to a
// server; the console takes it out of the address bar as soon as it has read it.
func consoleLink(ctx context.Context, c *session, p *parsed) error {
	if len(p.args) > 0 {
		return fmt.Errorf("console takes no arguments, got %q", p.args)
	}
	base := c.endpoint
	if u := p.str("url"); u != "" {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("--url must be an http:// or https:// URL, got %q", u)
		}
		base = u
	}
	var out struct {
		Path       string `json:"path"`
		ExpireTime string `json:"expireTime"`
		Principal  string `json:"principal"`
	}
	if err := c.cl.Do(ctx, http.MethodPost, "/v1/consoleSignInLinks", nil, map[string]any{}, &out); err != nil {
		return err
	}
	link := strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/console") + out.Path +
		"&project=" + url.QueryEscape(c.project) + "&location=" + url.QueryEscape(c.location)
	fmt.Fprintf(c.env.Stdout, "Open this link in a browser to sign in to the Basin console as %s.\n"+
		"It works once, until %s; the session it starts lasts an hour.\n\n    %s\n", out.Principal, out.ExpireTime, link)
	return nil
}
