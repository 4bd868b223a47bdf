package metrics

import "sort"

// ring keeps a volume's last Points, oldest first once it wraps. It grows as
// Points arrive, up to its capacity, so a new volume costs little until it has
// a day of history.
type ring struct {
	pts  []Point
	cap  int
	next int // where the next Point goes once full
}

func newRing(capacity int) *ring { return &ring{cap: capacity} }

func (r *ring) add(p Point) {
	if len(r.pts) < r.cap {
		r.pts = append(r.pts, p)
		return
	}
	r.pts[r.next] = p
	r.next = (r.next + 1) % r.cap
}

// ordered returns the Points in time order (the two halves of the ring).
func (r *ring) ordered() (older, newer []Point) {
	if len(r.pts) < r.cap {
		return nil, r.pts
	}
	return r.pts[r.next:], r.pts[:r.next]
}

// between calls fn for each Point with from ≤ T < to, in time order.
func (r *ring) between(from, to int64, fn func(*Point)) {
	older, newer := r.ordered()
	for _, half := range [2][]Point{older, newer} {
		i := sort.Search(len(half), func(i int) bool { return int64(half[i].T) >= from })
		for ; i < len(half) && int64(half[i].T) < to; i++ {
			fn(&half[i])
		}
	}
}

// last returns the newest Point.
func (r *ring) last() (Point, bool) {
	if len(r.pts) == 0 {
		return Point{}, false
	}
	if len(r.pts) < r.cap {
		return r.pts[len(r.pts)-1], true
	}
	return r.pts[(r.next+r.cap-1)%r.cap], true
}
