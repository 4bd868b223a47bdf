package api

import (
	"net/http"
	"net/url"

	"github.com/basin-nas/basin/internal/apiv1"
)

func (s *Server) location(p parent) apiv1.Location {
	return apiv1.Location{
		Name: p.name(), LocationID: p.location, DisplayName: p.location,
		Metadata: &apiv1.LocationMetadata{
			Type:                     apiv1.TypeLocationMetadata,
			SupportedServiceLevels:   []apiv1.ServiceLevel{1, 2, 3, 4},
			SupportedFlexPerformance: []apiv1.FlexPerformance{1, 2},
		},
	}
}

func (s *Server) listLocations(rq *request, project string) {
	out, err := s.listLocationsQ(project, rq.q)
	if err != nil {
		s.writeError(rq, err)
		return
	}
	s.writeJSON(rq, http.StatusOK, out)
}

// listLocationsQ lists the served locations of project with the list query q
// (pageSize, pageToken, filter, orderBy).
func (s *Server) listLocationsQ(project string, q url.Values) (apiv1.ListLocationsResponse, error) {
	lq, err := parseListQuery[apiv1.Location](q, "projects/"+project, "name")
	if err != nil {
		return apiv1.ListLocationsResponse{}, err
	}
	items := make([]apiv1.Location, 0, len(s.opts.Locations))
	for _, l := range s.opts.Locations {
		items = append(items, s.location(parent{project: project, location: l}))
	}
	out, next, err := page(lq, items, func(x apiv1.Location) string { return x.Name })
	if err != nil {
		return apiv1.ListLocationsResponse{}, err
	}
	return apiv1.ListLocationsResponse{Locations: out, NextPageToken: next}, nil
}

func (s *Server) getLocation(rq *request, p parent) {
	s.writeJSON(rq, http.StatusOK, s.location(p))
}
