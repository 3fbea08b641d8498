package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/runs"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// RunFile is the name of the file a trainer writes in each checkpoint
// directory (RUN_DIR/global_step_N/) of a run on the Tinker backend.
const RunFile = "tinker.json"

// Checkpoint records where a step's state lives on the Tinker service.
// It holds paths and names only, never the API key.
type Checkpoint struct {
	// WeightsPath is save_weights' tinker://…/weights/… path (weights and
	// optimizer state, for resume).
	WeightsPath string `json:"weights_path"`
	// SamplerPath is save_weights_for_sampler's path (the LoRA adapter
	// export downloads): tinker://RUN/sampler_weights/NAME from hosted
	// Tinker, tinker://MODEL_ID/CHECKPOINT_ID from SkyRL.
	SamplerPath string `json:"sampler_path,omitempty"`
	BaseModel   string `json:"base_model"`
	// BaseURL is the service the paths belong to.
	BaseURL string `json:"base_url,omitempty"`
}

// WriteCheckpoint writes dir/tinker.json atomically.
func WriteCheckpoint(dir string, c Checkpoint) error {
	if err := c.check(""); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := atomicfile.Create(filepath.Join(dir, RunFile))
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	return f.Commit()
}

// ReadCheckpoint reads dir/tinker.json.
func ReadCheckpoint(dir string) (Checkpoint, error) {
	path := filepath.Join(dir, RunFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Checkpoint{}, usererr.Errorf("%s does not exist: %s is not a checkpoint of a run on the Tinker backend", path, dir)
		}
		return Checkpoint{}, err
	}
	return ParseCheckpoint(path, b)
}

// ParseCheckpoint decodes the content of a tinker.json read from path.
func ParseCheckpoint(path string, b []byte) (Checkpoint, error) {
	var c Checkpoint
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Checkpoint{}, usererr.Errorf("%s is not a valid %s: %v", path, RunFile, err)
	}
	if err := c.check(path); err != nil {
		return Checkpoint{}, err
	}
	return c, nil
}

func (c Checkpoint) check(path string) error {
	where := RunFile
	if path != "" {
		where = path
	}
	if _, _, _, err := ParsePath(c.WeightsPath); err != nil {
		return usererr.Errorf("%s: weights_path: %v", where, err)
	}
	if c.SamplerPath != "" {
		if _, kind, _, err := ParsePath(c.SamplerPath); err != nil || kind != "sampler_weights" {
			return usererr.Errorf("%s: sampler_path %q is not a tinker://RUN/sampler_weights/NAME (hosted Tinker) or tinker://MODEL_ID/CHECKPOINT_ID (SkyRL) path", where, c.SamplerPath)
		}
	}
	return nil
}

// ParsePath splits tinker://RUN/KIND/NAME, KIND being weights or
// sampler_weights, and SkyRL's sampler form tinker://MODEL_ID/
// CHECKPOINT_ID (skyrl/tinker/engine.py at a9564572,
// process_save_weights_for_sampler), whose kind is sampler_weights.
func ParsePath(p string) (run, kind, name string, err error) {
	rest, ok := strings.CutPrefix(p, "tinker://")
	parts := strings.Split(rest, "/")
	if ok && len(parts) == 2 && parts[0] != "" && parts[1] != "" && parts[1] != "weights" && parts[1] != "sampler_weights" {
		parts = []string{parts[0], "sampler_weights", parts[1]}
	}
	if !ok || len(parts) != 3 || parts[0] == "" || parts[2] == "" || (parts[1] != "weights" && parts[1] != "sampler_weights") {
		return "", "", "", fmt.Errorf("%q is not a tinker://RUN/weights/NAME, tinker://RUN/sampler_weights/NAME or tinker://MODEL_ID/CHECKPOINT_ID path", p)
	}
	for _, s := range parts {
		if s == "." || s == ".." || strings.ContainsAny(s, "?#\\") {
			return "", "", "", fmt.Errorf("%q has a path segment that cannot be used in a URL", p)
		}
	}
	return parts[0], parts[1], parts[2], nil
}

// IsSkyRLPath reports a sampler path of SkyRL's two-segment form.
func IsSkyRLPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "tinker://")
	return ok && strings.Count(rest, "/") == 1
}

// DeleteCheckpoint removes from the service the tinker:// copies a local
// checkpoint directory records (its training weights and sampler
// weights), as the SDK's RestClient.delete_checkpoint does: the trainer
// calls it when trainer.max_ckpt_to_keep prunes the directory. A copy the
// service no longer has (deleted by hand, expired) is not an error; a
// directory that records none is left alone.
func (b *Backend) DeleteCheckpoint(ctx context.Context, dir string) error {
	ck, err := ReadCheckpoint(dir)
	if err != nil {
		return nil
	}
	var errs []error
	for _, p := range []string{ck.WeightsPath, ck.SamplerPath} {
		run, kind, name, err := ParsePath(p)
		if p == "" || err != nil {
			continue
		}
		_, err = b.c.call(ctx, http.MethodDelete, wire.CheckpointPath(run, kind, name))
		var he *HTTPError
		if err != nil && !(errors.As(err, &he) && he.Status == http.StatusNotFound) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// ResolveWeights turns what a user gave for starting weights (named by
// what, e.g. "backend.tinker.weights") into the tinker://…/weights/…
// path load_weights takes: a tinker:// path as it is, else the
// weights_path recorded in a directory's tinker.json (`rllm sft --out
// DIR`, a checkpoint's model/ directory), in a global_step_N directory's
// model/, or in a run directory's newest checkpoint.
func ResolveWeights(what, path string) (string, error) {
	if strings.HasPrefix(path, "tinker://") {
		return path, nil
	}
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return "", usererr.Errorf("%s %s is neither a tinker://…/weights/… path nor a directory; give the path save_weights returned, or a directory holding %s (rllm sft --out, a run or one of its global_step_N)", what, path, RunFile)
	}
	dirs := []string{path, filepath.Join(path, runs.ModelDir)}
	if n, ok, err := runs.Latest(path); err != nil {
		return "", err
	} else if ok {
		dirs = append(dirs, filepath.Join(path, runs.StepDir(n), runs.ModelDir))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, RunFile)); err == nil {
			c, err := ReadCheckpoint(dir)
			if err != nil {
				return "", err
			}
			return c.WeightsPath, nil
		}
	}
	return "", usererr.Errorf("%s %s holds no %s (nor does its model/ or newest checkpoint); give a directory rllm sft --out or a Tinker run wrote, or a tinker://…/weights/… path", what, path, RunFile)
}
