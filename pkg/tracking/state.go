package tracking

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// StateFile, in the run directory, keeps the trackers' run ids so that a
// resumed run continues the same W&B and MLflow runs.
const StateFile = "tracking.json"

type wandbState struct {
	BaseURL string `json:"base_url"`
	Entity  string `json:"entity"`
	Project string `json:"project"`
	RunID   string `json:"run_id"`
	// LastStep is the last step the tracker acknowledged, so a resumed
	// run knows which steps it redoes; Runtime its _runtime then.
	LastStep int     `json:"last_step"`
	Runtime  float64 `json:"runtime_s"`
}

type mlflowState struct {
	TrackingURI  string `json:"tracking_uri"`
	ExperimentID string `json:"experiment_id"`
	RunID        string `json:"run_id"`
	LastStep     int    `json:"last_step"`
}

type stateData struct {
	WandB  *wandbState  `json:"wandb,omitempty"`
	MLflow *mlflowState `json:"mlflow,omitempty"`
}

// stateFile is tracking.json, shared by the remote sinks of a run.
type stateFile struct {
	mu   sync.Mutex
	path string
	d    stateData
}

// loadState reads dir's tracking.json (empty when absent).
func loadState(dir string) (*stateFile, error) {
	path := filepath.Join(dir, StateFile)
	s := &stateFile{path: path}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &s.d); err != nil {
			return nil, fmt.Errorf("%s: %v; remove it to start new tracker runs", path, err)
		}
	}
	return s, nil
}

// update changes the state under its lock and writes it.
func (s *stateFile) update(f func(d *stateData)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.d)
	b, err := json.MarshalIndent(s.d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), atomicfile.DirMode); err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path, append(b, '\n'))
}

func (s *stateFile) get() stateData {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.d
	if d.WandB != nil {
		w := *d.WandB
		d.WandB = &w
	}
	if d.MLflow != nil {
		m := *d.MLflow
		d.MLflow = &m
	}
	return d
}
