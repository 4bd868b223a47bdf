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
	"slices"
	"strings"
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
	secrets *secret.Box // under SecretsKeyFile or --secrets-key-file
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
	keys, err := loadKeys(cfg)
	if err != nil {
		return s, err
	}
	if s.secrets, err = secret.New(keys[0], keys[1:]...); err != nil {
		return s, err
	}
	if s.tokenKey, err = hkdf.Key(sha256.New, keys[0], nil, "basin access tokens v1", 32); err != nil {
		return s, err
	}
	if err := adoptKey(ctx, s.store, s.secrets, keyPath(cfg), log); err != nil {
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

// audiences are the URLs self-signed JWTs may name as their audience (beside
// Google's, iam.DefaultAudiences): --public-url, and the listen address's.
func audiences(cfg config.Config) []string {
	return []string{baseURL(cfg), "http://" + cfg.Listen + "/", "https://" + cfg.Listen + "/"}
}

// baseURL is the API's URL for clients: --public-url, or the listen address's.
func baseURL(cfg config.Config) string {
	if cfg.PublicURL != "" {
		return strings.TrimSuffix(cfg.PublicURL, "/") + "/"
	}
	return "http://" + cfg.Listen + "/"
}

// nodeURL is this node's own API URL (its listen address's), which GET /v1/nodes
// shows: --public-url may name the service's, in front of every node.
func nodeURL(cfg config.Config) string {
	if cfg.PublicURL == "" {
		return baseURL(cfg)
	}
	return "http://" + cfg.Listen + "/"
}

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

// keyPath is the secrets key file: --secrets-key-file, or the data directory's.
func keyPath(cfg config.Config) string {
	if cfg.SecretsKeyFile != "" {
		return cfg.SecretsKeyFile
	}
	return filepath.Join(cfg.DataDir, SecretsKeyFile)
}

// loadKeys reads the secrets keys. The data directory's key file is made if
// missing (a single node's first start); a --secrets-key-file never is: every
// node of a cluster must be given the same one.
func loadKeys(cfg config.Config) ([][]byte, error) {
	if cfg.SecretsKeyFile == "" {
		return secret.LoadOrCreateKey(keyPath(cfg))
	}
	keys, err := secret.LoadKeys(cfg.SecretsKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--secrets-key-file %s does not exist: copy the cluster's key file there (docs/operations.md)", cfg.SecretsKeyFile)
	}
	return keys, err
}

// ErrWrongKey: the secrets key given is not the one the store's secrets are
// sealed with.
var ErrWrongKey = errors.New("wrong secrets key")

// clusterKey is the store's record of the key its secrets are sealed with
// (document KindClusterKey "secrets"): its ID, never the key.
type clusterKey struct {
	KeyID string `json:"keyId"`
}

const clusterKeyName = "secrets"

// adoptKey checks box's keys against the store's record and brings the store's
// secrets under box's sealing key, in one transaction:
//   - a new store records the sealing key's ID;
//   - a store sealed under another of box's keys (its key file got a new first
//     key: basin secrets rotate, or a crash in its middle) is resealed under the
//     new key, and records it;
//   - a store sealed under a key box lacks is refused (ErrWrongKey): a node
//     started with another key file could neither open its secrets nor accept
//     its nodes' tokens.
//
// Secrets an earlier version stored in clear, or sealed without a key ID, are
// sealed under the sealing key on the way; clear text found makes the SQLite
// database compacted after, so it does not linger in free pages or the WAL.
func adoptKey(ctx context.Context, st store.Backend, box *secret.Box, path string, log *slog.Logger) error {
	var resealed, clear, unopenable int
	err := st.Update(ctx, func(tx store.Tx) error {
		var ck clusterKey
		err := tx.Get(store.KindClusterKey, clusterKeyName, &ck)
		switch {
		case errors.Is(err, model.ErrNotFound):
		case err != nil:
			return err
		case !slices.Contains(box.KeyIDs(), ck.KeyID):
			return fmt.Errorf("%w: %s holds key %s, but this database's secrets are sealed with key %s: start every node with the cluster's key file (--secrets-key-file; docs/operations.md)",
				ErrWrongKey, path, box.KeyID(), ck.KeyID)
		}
		if resealed, clear, unopenable, err = resealAll(tx, box); err != nil {
			return err
		}
		if ck.KeyID == box.KeyID() {
			return nil
		}
		if ck.KeyID != "" {
			log.Info("secrets resealed under the key file's new key", "old_key", ck.KeyID, "key", box.KeyID(), "records", resealed)
		}
		return tx.Put(store.KindClusterKey, clusterKeyName, "", clusterKey{KeyID: box.KeyID()})
	})
	if unopenable > 0 {
		log.Warn("stored secrets the key file cannot open (sealed under a key no longer in it); left as they are", "records", unopenable)
	}
	if err != nil || clear == 0 {
		return err
	}
	log.Info("sealed clear-text secrets left by an earlier version", "records", clear)
	return st.Compact(ctx)
}

// legacyAD is an Active Directory policy as stored before passwords were sealed.
type legacyAD struct {
	model.ActiveDirectory
	Password *string `json:"password,omitempty"`
}

// resealAll seals, under box's sealing key, every secret stored otherwise: the
// Active Directory policies' passwords, and those in operation records (Prev,
// Response), whether in clear text (an earlier version's), sealed without a key
// ID, or under an older key. It returns how many records it rewrote, how many
// of them held clear text, and how many it could not open (left as they are).
func resealAll(tx store.Tx, box *secret.Box) (resealed, clear, unopenable int, _ error) {
	// reseal returns doc with its password sealed under box's key, or nil if it
	// needs no change.
	reseal := func(doc []byte) ([]byte, error) {
		var a legacyAD
		if len(doc) == 0 || json.Unmarshal(doc, &a) != nil {
			return nil, nil
		}
		switch {
		case a.Password != nil:
			clear++
			if *a.Password != "" {
				sealed, err := box.Seal(*a.Password, a.PasswordAAD())
				if err != nil {
					return nil, err
				}
				a.PasswordSealed = sealed
			}
		case a.PasswordSealed != "" && secret.SealedWith(a.PasswordSealed) != box.KeyID():
			pw, err := box.Open(a.PasswordSealed, a.PasswordAAD())
			if err != nil {
				// Sealed under a key long gone (a key file lost before the
				// store recorded key IDs): left as it is, for its join to
				// fail and say so, rather than keep Basin from starting.
				unopenable++
				return nil, nil
			}
			sealed, err := box.Seal(pw, a.PasswordAAD())
			if err != nil {
				return nil, err
			}
			a.PasswordSealed = sealed
		default:
			return nil, nil
		}
		return json.Marshal(&a.ActiveDirectory)
	}
	raws, err := tx.List(store.KindActiveDirectory, "")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, raw := range raws {
		doc, err := reseal(raw)
		if err != nil {
			return 0, 0, 0, err
		}
		if doc == nil {
			continue
		}
		var a model.ActiveDirectory
		if err := json.Unmarshal(doc, &a); err != nil {
			return 0, 0, 0, err
		}
		if err := store.PutAD(tx, &a); err != nil {
			return 0, 0, 0, err
		}
		resealed++
	}
	ops, err := store.List[model.Operation](tx, store.KindOperation, "")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, op := range ops {
		changed := false
		for _, f := range []*[]byte{&op.Prev, &op.Response} {
			doc, err := reseal(*f)
			if err != nil {
				return 0, 0, 0, err
			}
			if doc != nil {
				*f, changed = doc, true
			}
		}
		if changed {
			if err := store.PutOperation(tx, op); err != nil {
				return 0, 0, 0, err
			}
			resealed++
		}
	}
	return resealed, clear, unopenable, nil
}

// RotateSecretsKey puts a new key first in the secrets key file (the old ones
// stay after it, to open backups sealed before) and reseals every stored secret
// under it. It refuses while a Basin serves the data directory or, with
// PostgreSQL, the database. A crash between writing the file and resealing is
// finished by the next start. Access tokens issued before die (their key
// derives from the sealing key). It returns the old and new key IDs.
func RotateSecretsKey(ctx context.Context, cfg config.Config, log *slog.Logger) (oldID, newID string, err error) {
	if err := cfg.Validate(); err != nil {
		return "", "", err
	}
	s, err := openState(ctx, cfg, log)
	if err != nil {
		return "", "", err
	}
	defer s.Close()
	// This data directory's Basin is stopped (openState holds its lock); other
	// nodes on the database must be too: they would go on with the old key
	// alone, unable to open what is resealed.
	if err := noOtherNodeAlive(ctx, s.store, cfg.DataDir); err != nil {
		return "", "", err
	}
	keys, err := secret.LoadKeys(keyPath(cfg))
	if err != nil {
		return "", "", err
	}
	key, err := secret.NewKey()
	if err != nil {
		return "", "", err
	}
	keys = append([][]byte{key}, keys...)
	box, err := secret.New(keys[0], keys[1:]...)
	if err != nil {
		return "", "", err
	}
	if err := secret.WriteKeys(keyPath(cfg), keys); err != nil {
		return "", "", err
	}
	if err := adoptKey(ctx, s.store, box, keyPath(cfg), log); err != nil {
		return "", "", err
	}
	return s.secrets.KeyID(), box.KeyID(), nil
}
