package metrics

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// agg summarises the Points of one bucket (a 5-minute rollup, or a step of a
// query): per stored value its count, minimum, maximum and a weighted sum.
// Means are plain means, except latencies, which are weighted by their
// direction's requests (the mean latency of the bucket's requests, not of its
// intervals).
type agg struct {
	start int64 // bucket start, Unix seconds
	n     [numStored]uint32
	min   [numStored]float32
	max   [numStored]float32
	sum   [numStored]float64 // Σ value × weight
	w     [numStored]float64 // Σ weight
}

func newAgg(start int64) *agg {
	a := &agg{start: start}
	for i := range a.min {
		a.min[i] = float32(math.Inf(1))
		a.max[i] = float32(math.Inf(-1))
	}
	return a
}

// weightOf is the weight of a Point's stored value i: its direction's requests
// per second for a latency, 1 otherwise.
func weightOf(p *Point, i int) float64 {
	switch i {
	case readLatency:
		return float64(p.V[readOps])
	case writeLatency:
		return float64(p.V[writeOps])
	}
	return 1
}

func (a *agg) add(p *Point) {
	for i, v := range p.V {
		if math.IsNaN(float64(v)) {
			continue
		}
		w := weightOf(p, i)
		if math.IsNaN(w) || w <= 0 {
			continue
		}
		a.n[i]++
		a.min[i] = min(a.min[i], v)
		a.max[i] = max(a.max[i], v)
		a.sum[i] += float64(v) * w
		a.w[i] += w
	}
}

// merge adds b's values (the same bucket summarised in two parts: before and
// after a restart).
func (a *agg) merge(b *agg) {
	for i := range a.n {
		if b.n[i] == 0 {
			continue
		}
		a.n[i] += b.n[i]
		a.min[i] = min(a.min[i], b.min[i])
		a.max[i] = max(a.max[i], b.max[i])
		a.sum[i] += b.sum[i]
		a.w[i] += b.w[i]
	}
}

// means returns each stored value's mean (NaN where the bucket has none).
func (a *agg) means() [numStored]float64 {
	var m [numStored]float64
	for i := range m {
		m[i] = math.NaN()
		if a.n[i] > 0 && a.w[i] > 0 {
			m[i] = a.sum[i] / a.w[i]
		}
	}
	return m
}

// empty reports whether the bucket saw no value at all.
func (a *agg) empty() bool {
	for _, n := range a.n {
		if n > 0 {
			return false
		}
	}
	return true
}

// rollupVersion is the first byte of an encoded rollup.
const rollupVersion = 1

// encodedSize is the size of an encoded rollup: version, count of values, then
// per value n (uint32), min and max (float32), sum and weight (float64).
const encodedSize = 2 + numStored*(4+4+4+8+8)

// encode writes a rollup for the store. Values are in the order of the stored
// constants; a decoder that knows fewer reads what it knows.
func (a *agg) encode() []byte { return a.appendEncoded(make([]byte, 0, encodedSize)) }

// appendEncoded appends what encode returns to b.
func (a *agg) appendEncoded(b []byte) []byte {
	b = append(b, rollupVersion, numStored)
	for i := range a.n {
		b = binary.LittleEndian.AppendUint32(b, a.n[i])
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(a.min[i]))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(a.max[i]))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.sum[i]))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.w[i]))
	}
	return b
}

var errRollup = errors.New("malformed rollup")

// decodeAgg reads what encode wrote, refusing anything else.
func decodeAgg(start int64, b []byte) (*agg, error) {
	if len(b) < 2 || b[0] != rollupVersion {
		return nil, fmt.Errorf("%w: version", errRollup)
	}
	k := int(b[1])
	if len(b) != 2+k*28 {
		return nil, fmt.Errorf("%w: %d bytes for %d values", errRollup, len(b), k)
	}
	a := newAgg(start)
	b = b[2:]
	for i := 0; i < k; i++ {
		r := b[i*28:]
		if i >= numStored {
			break
		}
		a.n[i] = binary.LittleEndian.Uint32(r)
		a.min[i] = math.Float32frombits(binary.LittleEndian.Uint32(r[4:]))
		a.max[i] = math.Float32frombits(binary.LittleEndian.Uint32(r[8:]))
		a.sum[i] = math.Float64frombits(binary.LittleEndian.Uint64(r[12:]))
		a.w[i] = math.Float64frombits(binary.LittleEndian.Uint64(r[20:]))
		if a.n[i] > 0 && (math.IsNaN(a.sum[i]) || math.IsNaN(a.w[i]) || a.w[i] <= 0) {
			return nil, fmt.Errorf("%w: value %d", errRollup, i)
		}
	}
	return a, nil
}
