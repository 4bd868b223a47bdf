package api

import (
	"net/http"
	"net/url"

	"github.com/basin-nas/basin/internal/model"
)

// checkSameOrigin refuses a browser request made by a page of another origin. The
// web console (served by Basin itself at /console/) is the only page that needs the
// API, and Basin sends no CORS headers, so another site's scripts can never read an
// answer; refusing their requests outright also keeps them from changing anything
// (a form post, a fetch with mode no-cors). Browsers say where a request comes from
// in Sec-Fetch-Site and Origin; the official clients, gcloud and curl send neither
// and are let through. Origin must name this server's own host:port as the request
// reached it (Host): behind a reverse proxy, keep the Host header.
func checkSameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none": // none: typed into the address bar
	default:
		return model.Errorf(model.ErrPermissionDenied, "Cross-origin request refused: Sec-Fetch-Site is %q; Basin's API takes browser requests only from its own console", site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || u.Host != r.Host || (u.Scheme != "http" && u.Scheme != "https") {
			return model.Errorf(model.ErrPermissionDenied, "Cross-origin request refused: Origin %q is not this server (%s); Basin's API takes browser requests only from its own console", o, r.Host)
		}
	}
	return nil
}
