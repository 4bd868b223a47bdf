package api

import (
	"context"
)

// Capacity reports the node store's space and volumes' usage, read fresh from the
// storage backend. Its methods run inside a store transaction, so they should be
// cheap (a statfs, a quota-group read). The intent layer uses it (intent.Capacity).
type Capacity interface {
	StoreSpace(ctx context.Context) (sizeBytes, freeBytes int64, err error)
	VolumeUsedBytes(ctx context.Context, key string) (int64, error) // key = model.Volume.Key
}
