package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/usererr"
	"github.com/rllm-org/rllm-go/pkg/workflow"
)

// runFile records, in the run directory, what makes a run the run it is,
// so a later command that resumes it can refuse to continue a different
// one.
const runFile = "run.json"

// RunIdentity is what makes a run a different run when it changes (the
// task, the agent, the model, the backend), as key → value, and what may
// change on resume but is worth a word (batch shape).
type RunIdentity struct {
	Keys  map[string]string `json:"keys"`
	Shape map[string]string `json:"shape"`
	// Data names exactly what the run trained on when its files came
	// from the Hugging Face Hub: each hf:// URI with the commit its
	// revision resolved to (recorded, not compared on resume).
	Data []DataSource `json:"data,omitempty"`
}

// DataSource is one data file list entry fetched from the Hub.
type DataSource struct {
	Key      string   `json:"key"` // data.train_files or data.val_files
	URI      string   `json:"uri"`
	Repo     string   `json:"repo"`
	Revision string   `json:"revision"`
	Commit   string   `json:"commit"`
	Config   string   `json:"config,omitempty"`
	Split    string   `json:"split"`
	Files    []string `json:"files"`
	Rows     int      `json:"rows"`
}

func runIdentity(c *config.Config) RunIdentity {
	id := RunIdentity{Keys: map[string]string{
		"env.name":                c.Env.Name,
		"agent.name":              workflow.AgentFor(c.Agent.Name, c.Env.Name),
		"workflow.name":           c.Workflow.Name,
		"backend.name":            c.Backend.Name,
		"algorithm.adv_estimator": c.Algorithm.AdvEstimator,
	}, Shape: map[string]string{
		"data.train_batch_size": fmt.Sprint(c.Data.TrainBatchSize),
		"rollout.n":             fmt.Sprint(c.Rollout.N),
	}}
	switch c.Backend.Name {
	case "local":
		l := c.Backend.Local
		id.Keys["backend.local.layers"] = fmt.Sprint(l.Layers)
		id.Keys["backend.local.d_model"] = fmt.Sprint(l.DModel)
		id.Keys["backend.local.heads"] = fmt.Sprint(l.Heads)
		id.Keys["backend.local.context"] = fmt.Sprint(l.Context)
	case "tinker":
		id.Keys["backend.tinker.base_model"] = c.Backend.Tinker.BaseModel
		id.Keys["backend.tinker.lora_rank"] = fmt.Sprint(c.Backend.Tinker.LoRARank)
	}
	return id
}

// recordRun writes the identity of a fresh run.
func recordRun(dir string, id RunIdentity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, runFile), append(b, '\n'))
}

// checkResume compares the run being resumed with this one: a different
// env, agent, model or backend is refused, naming the keys; a different
// batch shape is allowed and described in the returned line ("" when
// nothing changed). Runs from before run.json existed are not checked.
func checkResume(dir string, now RunIdentity) (string, error) {
	path := filepath.Join(dir, runFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var was RunIdentity
	if err := json.Unmarshal(b, &was); err != nil {
		return "", usererr.Errorf("%s: %v; the run record is damaged: start fresh with trainer.resume_mode=disable and another trainer.experiment_name", path, err)
	}
	diff := func(a, b map[string]string) []string {
		var out []string
		for k, v := range b {
			if old, ok := a[k]; ok && old != v {
				out = append(out, fmt.Sprintf("%s %s (was %s)", k, v, old))
			}
		}
		slices.Sort(out)
		return out
	}
	if d := diff(was.Keys, now.Keys); len(d) > 0 {
		return "", usererr.Errorf("trainer.default_local_dir: %s holds a different run: %s; resuming it would mix two runs. Start a new run with another trainer.experiment_name (or trainer.resume_mode=disable in a fresh directory)", dir, strings.Join(d, ", "))
	}
	if d := diff(was.Shape, now.Shape); len(d) > 0 {
		return "resuming with " + strings.Join(d, ", "), nil
	}
	return "", nil
}
