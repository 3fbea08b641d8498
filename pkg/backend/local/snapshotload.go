package local

import (
	"path/filepath"
)

// LoadSnapshot reads the weights of the checkpoint directory dir (as
// SaveState writes it: manifest.json and model.safetensors; the optimizer
// state is not read) into an immutable sampling snapshot. An empty name
// becomes the manifest's model name; the snapshot's version is the
// checkpoint's optimizer step. Nothing is shared with any backend.
func LoadSnapshot(dir, name string, workers int) (*Snapshot, Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, Manifest{}, err
	}
	flat, err := readTensors(filepath.Join(dir, WeightsFile), m.Config, "")
	if err != nil {
		return nil, Manifest{}, err
	}
	if name == "" {
		name = m.Model
	}
	return &Snapshot{name: name, version: m.Step, w: bindWeights(m.Config, flat), workers: max(workers, 1)}, m, nil
}
