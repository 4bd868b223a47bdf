// Package goclient drives Basin with Google's generated Go client for the NetApp
// Volumes API, google.golang.org/api/netapp/v1, as its users do: default
// credentials (GOOGLE_APPLICATION_CREDENTIALS naming a Basin key file, whose
// token_uri the library exchanges a signed assertion at for an access token) and
// option.WithEndpoint. It is a module of its own, so Basin's module does not depend
// on google.golang.org/api. test/e2e's TestGoClient starts a basin serve and runs
// these tests against it; without BASIN_ENDPOINT they skip.
package goclient
