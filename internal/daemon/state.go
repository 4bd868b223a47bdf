package daemon

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/basin-nas/basin/internal/config"
	"github.com/basin-nas/basin/internal/iam"
	"github.com/basin-nas/basin/internal/model"
	"github.com/basin-nas/basin/internal/secret"
	"github.com/basin-nas/basin/internal/store"
)

// state is what Basin keeps in its data directory, all private to it (the directory
// 0700, every file 0600): the lock, the store (or a connection to its PostgreSQL
// database), the audit log and the owner's key.
// Opening it needs no root.
type state struct {
	unlock  func()
	store   store.Backend
	audit   *os.File
	secrets *secret.Box // under SecretsKeyFile
	// tokenKey authenticates the access tokens /token issues; derived from the
	// secrets key, so tokens outlive a restart and die with a new key.
	tokenKey []byte
}

// SecretsKeyFile is the file under the data directory holding the key that seals
// stored secrets (internal/secret). Back it up with the database: without it, the
// sealed secrets cannot be opened.
const SecretsKeyFile = "secrets.key"

// openState prepares the data directory and opens what Basin keeps there. On error,
// whatever was opened is closed again.
func openState(ctx context.Context, cfg config.Config, log *slog.Logger) (s *state, err error) {
	if err := privateDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	s = &state{}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	if s.unlock, err = lockDataDir(cfg.DataDir); err != nil {
		return s, err
	}
	if s.store, err = store.Open(ctx, cfg.Database, filepath.Join(cfg.DataDir, "basin.db")); err != nil {
		return s, err
	}
	if pg, ok := s.store.(*store.Postgres); ok {
		if err := pg.ClaimSoleNode(ctx); err != nil {
			return s, err
		}
	}
	key, err := secret.LoadOrCreateKey(filepath.Join(cfg.DataDir, SecretsKeyFile))
	if err != nil {
		return s, err
	}
	if s.secrets, err = secret.New(key); err != nil {
		return s, err
	}
	if s.tokenKey, err = hkdf.Key(sha256.New, key, nil, "basin access tokens v1", 32); err != nil {
		return s, err
	}
	if err := sealLegacySecrets(ctx, s.store, s.secrets, log); err != nil {
		return s, err
	}
	if s.audit, err = openPrivate(filepath.Join(cfg.DataDir, "audit.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND); err != nil {
		return s, fmt.Errorf("audit log: %w", err)
	}
	if !cfg.InsecureNoAuth {
		keyPath := filepath.Join(cfg.DataDir, OwnerKeyFile)
		created, err := iam.BootstrapOwner(ctx, s.store, keyPath, baseURL(cfg)+"token", time.Now())
		if err != nil {
			return s, fmt.Errorf("owner account: %w", err)
		}
		if created {
			log.Info("wrote the owner's service-account key", "path", keyPath, "account", iam.OwnerEmail)
		}
		if err := os.Chmod(keyPath, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return s, fmt.Errorf("owner key: %w", err)
		}
	}
	return s, nil
}

// Close closes what openState opened; it is safe on a partly opened state.
func (s *state) Close() error {
	var err error
	if s.audit != nil {
		err = errors.Join(err, s.audit.Close())
	}
	if s.store != nil {
		err = errors.Join(err, s.store.Close())
	}
	if s.unlock != nil {
		s.unlock()
	}
	return err
}

func baseURL(cfg config.Config) string { return "http://" + cfg.Listen + "/" }

// privateDir creates dir mode 0700, or makes an existing one 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// openPrivate opens a file mode 0600, correcting the mode of an existing one.
func openPrivate(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockDataDir makes sure one basin serve at a time uses a data directory.
func lockDataDir(dir string) (func(), error) {
	f, err := openPrivate(filepath.Join(dir, "basin.lock"), os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another basin serve", dir)
	}
	return func() { f.Close() }, nil
}

// legacyAD is an Active Directory policy as stored before passwords were sealed.
type legacyAD struct {
	model.ActiveDirectory
	Password *string `json:"password,omitempty"`
}

// sealLegacySecrets seals the clear passwords a database written by an earlier
// version holds, in the policies and in operation records (Prev, Response), then
// compacts the database so the clear text does not linger in free pages or the WAL.
func sealLegacySecrets(ctx context.Context, st store.Backend, box *secret.Box, log *slog.Logger) error {
	// reseal returns doc with its clear password sealed, or nil if it has none.
	reseal := func(doc []byte) ([]byte, error) {
		var a legacyAD
		if len(doc) == 0 || json.Unmarshal(doc, &a) != nil || a.Password == nil {
			return nil, nil
		}
		if *a.Password != "" {
			sealed, err := box.Seal(*a.Password, a.PasswordAAD())
			if err != nil {
				return nil, err
			}
			a.PasswordSealed = sealed
		}
		return json.Marshal(&a.ActiveDirectory)
	}
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		raws, err := tx.List(store.KindActiveDirectory, "")
		if err != nil {
			return err
		}
		for _, raw := range raws {
			doc, err := reseal(raw)
			if err != nil {
				return err
			}
			if doc == nil {
				continue
			}
			var a model.ActiveDirectory
			if err := json.Unmarshal(doc, &a); err != nil {
				return err
			}
			if err := store.PutAD(tx, &a); err != nil {
				return err
			}
			n++
		}
		ops, err := store.List[model.Operation](tx, store.KindOperation, "")
		if err != nil {
			return err
		}
		for _, op := range ops {
			changed := false
			for _, f := range []*[]byte{&op.Prev, &op.Response} {
				doc, err := reseal(*f)
				if err != nil {
					return err
				}
				if doc != nil {
					*f, changed = doc, true
				}
			}
			if changed {
				if err := store.PutOperation(tx, op); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	if err != nil || n == 0 {
		return err
	}
	log.Info("sealed clear-text secrets left by an earlier version", "records", n)
	return st.Compact(ctx)
}
