package local

import (
	"context"
	"path/filepath"
)

// LoadSnapshotContext reads the weights of the checkpoint directory dir
// (as SaveState writes it: manifest.json and model.safetensors; the
// optimizer state is not read) into an immutable sampling snapshot. An
// empty name becomes the manifest's model name; the snapshot's version is
// the checkpoint's optimizer step. Nothing is shared with any backend. It
// stops when ctx ends and, with want set, refuses a checkpoint of another
// shape from its manifest, before reading any weight. The weights file is read with a bound (its
// size for the manifest's shape), so a file that is not one (a link to
// /dev/zero, a huge file) is refused instead of filling memory.
func LoadSnapshotContext(ctx context.Context, dir, name string, workers int, want *Config) (*Snapshot, Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, Manifest{}, err
	}
	if want != nil {
		if err := CheckSameShape(m.Config, *want); err != nil {
			return nil, Manifest{}, err
		}
	}
	flat, err := readTensors(ctx, filepath.Join(dir, WeightsFile), m.Config, "")
	if err != nil {
		return nil, Manifest{}, err
	}
	if name == "" {
		name = m.Model
	}
	return &Snapshot{name: name, version: m.Step, w: bindWeights(m.Config, flat), workers: max(workers, 1)}, m, nil
}
