package api

import (
	"context"
)

// Capacity reports the node store's space and volumes' usage, read fresh from the
// storage backend. Its methods run inside a store transaction, so they should be
// cheap (a statfs, a quota-group read). The intent layer uses it (intent.Capacity).
type Capacity interface {
	// StoreSpace: what pools may commit at a ratio of 1, and what volumes may
	// still be given (intent.Capacity). A Capacity may also say what a new volume
	// takes (intent.Allocator).
	StoreSpace(ctx context.Context) (sizeBytes, freeBytes int64, err error)
	VolumeUsedBytes(ctx context.Context, key string) (int64, error) // key = model.Volume.Key
}
