package herder

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// storeFile is the standalone worker's state file in the data directory.
const storeFile = "standalone.json"

// storedState is what the data directory holds: every connector's
// configuration, target state and last known task states.
type storedState struct {
	Version    int                         `json:"version"`
	Connectors map[string]*storedConnector `json:"connectors"`
}

type storedConnector struct {
	Config map[string]string  `json:"config"`
	Target engine.TargetState `json:"target_state"`
	State  engine.State       `json:"state,omitempty"`
	Trace  string             `json:"trace,omitempty"`
	Tasks  []storedTask       `json:"tasks,omitempty"`
	// SecretDropped is the note of a secret a configuration change
	// dropped (the connector fails until it is sent again).
	SecretDropped string    `json:"secret_dropped,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

type storedTask struct {
	ID    int          `json:"id"`
	State engine.State `json:"state"`
	Trace string       `json:"trace,omitempty"`
}

// loadState reads the state file; a missing file is an empty state.
func loadState(dir string) (*storedState, error) {
	b, err := os.ReadFile(filepath.Join(dir, storeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &storedState{Version: 1, Connectors: map[string]*storedConnector{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("connectors: read worker state: %w", err)
	}
	var st storedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("connectors: %s is corrupt: %w", filepath.Join(dir, storeFile), err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("connectors: %s has version %d; this txsink reads version 1", filepath.Join(dir, storeFile), st.Version)
	}
	if st.Connectors == nil {
		st.Connectors = map[string]*storedConnector{}
	}
	return &st, nil
}

// tempPattern names the temporary files saveState writes.
const tempPattern = "." + storeFile + ".*.tmp"

// removeStaleTemps removes temporary state files a write left behind when
// the process was killed between writing and renaming one (they may hold
// connector passwords), and returns how many it removed. Only one worker
// uses a data directory, so at start none is in use.
func removeStaleTemps(dir string) (int, error) {
	names, err := filepath.Glob(filepath.Join(dir, tempPattern))
	if err != nil {
		return 0, fmt.Errorf("connectors: data directory: %w", err)
	}
	for _, n := range names {
		if err := os.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("connectors: removing a stale temporary state file: %w", err)
		}
	}
	return len(names), nil
}

// saveState writes the state file atomically: a temporary file in the same
// directory is written and fsynced, renamed over the old file, and the
// directory is fsynced so the rename itself is durable. A crash at any
// point leaves either the old or the new file (and perhaps a temporary
// file, which removeStaleTemps deletes at the next start). Both hold
// connector passwords, so they are readable by the owner only.
func saveState(dir string, st *storedState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, tempPattern) // mode 0600
	if err != nil {
		return fmt.Errorf("connectors: write worker state: %w", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("connectors: write worker state: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("connectors: write worker state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("connectors: fsync worker state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("connectors: write worker state: %w", err)
	}
	if err := os.Rename(tmpName, filepath.Join(dir, storeFile)); err != nil {
		return fmt.Errorf("connectors: write worker state: %w", err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("connectors: fsync data directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("connectors: fsync data directory: %w", err)
	}
	return nil
}
