package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/backend/tinker"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

type exportOptions struct {
	config  configFlags
	step    int
	maxSize int64
	args    []string
}

func newExportCmd(a *App) *cobra.Command {
	opts := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export RUN_DIR OUT [--step N] [key=value ...]",
		Short: "Download the LoRA adapter of a Tinker checkpoint as a PEFT directory",
		Long: `Export the LoRA adapter a run on the Tinker backend saved at a checkpoint
(tinker.json in RUN_DIR/global_step_N/model, where rllm train records it) into OUT as a PEFT adapter directory
(adapter_config.json and adapter weights), the form vLLM's --lora-modules and
/v1/load_lora_adapter load. RUN_DIR may also be one global_step_N directory.

Without --step, the newest checkpoint (latest_checkpointed_iteration.txt, else
the highest global_step_N) is exported. The service is the one the checkpoint
recorded, or backend.tinker.base_url when set; the API key comes from the
variable named by backend.tinker.api_key_env or from backend.tinker.api_key_file.
OUT must not exist or be empty. Serve it with vLLM:

  vllm serve Qwen/Qwen3-8B --enable-lora --lora-modules run1=adapters/run1`,
		Example: `  rllm export checkpoints/rllm/run1 adapters/run1
  rllm export checkpoints/rllm/run1 adapters/step20 --step 20`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.args = args
			return runExport(cmd, a, opts)
		},
	}
	cmd.Flags().IntVar(&opts.step, "step", -1, "export global_step_`N` instead of the newest checkpoint")
	cmd.Flags().Int64Var(&opts.maxSize, "max-size", tinker.DefaultMaxArchive, "refuse an archive that downloads or unpacks to more than this many `bytes`")
	opts.config.register(cmd)
	return cmd
}

func runExport(cmd *cobra.Command, a *App, opts *exportOptions) error {
	var paths, overrides []string
	for _, arg := range opts.args {
		if strings.Contains(arg, "=") || strings.HasPrefix(arg, "~") {
			overrides = append(overrides, arg)
		} else {
			paths = append(paths, arg)
		}
	}
	if len(paths) != 2 {
		return usagef("export takes RUN_DIR and OUT (got %d paths); e.g. rllm export checkpoints/rllm/run1 adapters/run1", len(paths))
	}
	if opts.maxSize <= 0 {
		return usagef("--max-size must be a positive number of bytes")
	}
	runDir, out := paths[0], paths[1]
	ld, err := opts.config.load(a, overrides)
	if err != nil {
		return err
	}
	dir, err := exportStepDir(runDir, opts.step)
	if err != nil {
		return err
	}
	// The trainer records the checkpoint beside its model state
	// (global_step_N/model/tinker.json); a directory may also hold it itself.
	ck, err := tinker.ReadCheckpoint(dir)
	if err != nil {
		if alt, aerr := tinker.ReadCheckpoint(filepath.Join(dir, "model")); aerr == nil {
			ck, err = alt, nil
		}
	}
	if err != nil {
		return err
	}
	tk := ld.Config.Backend.Tinker
	base := tk.BaseURL
	if ck.BaseURL != "" && ld.Origin("backend.tinker.base_url").Layer == "default" {
		base = ck.BaseURL
	}
	key, source, err := tinker.APIKey(tk, a.Getenv, a.ReadFile)
	if err != nil {
		return err
	}
	client, err := tinker.NewClient(tinker.ClientOptions{BaseURL: base, APIKey: key, KeySource: source, Log: a.Stderr,
		MaxRetries: tk.MaxRetries, CredentialCmd: tinker.CredentialCmd(a.Getenv)})
	if err != nil {
		return err
	}
	path := ck.SamplerPath
	if path == "" {
		path = ck.WeightsPath
	}
	fmt.Fprintf(a.Stderr, "rllm: exporting %s (%s) from %s\n", path, ck.BaseModel, client.BaseURL())
	if err := client.ExportAdapter(cmd.Context(), path, out, opts.maxSize); err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.Stdout, "%s\n", out)
	return err
}

// exportStepDir finds the checkpoint directory: RUN_DIR itself when it
// holds tinker.json, else RUN_DIR/global_step_N for --step N or the
// newest checkpoint. (runs.Latest is stricter than a Tinker run needs: its
// fallback wants the local backend's model manifest.)
func exportStepDir(runDir string, step int) (string, error) {
	st, err := os.Stat(runDir)
	if err != nil || !st.IsDir() {
		return "", usagef("%s is not a directory; give the run directory (trainer.default_local_dir) of a Tinker run", runDir)
	}
	if step < 0 {
		if _, err := os.Stat(filepath.Join(runDir, tinker.RunFile)); err == nil {
			return runDir, nil
		}
	}
	if step >= 0 {
		dir := filepath.Join(runDir, runs.StepDir(step))
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			saved, _ := runs.Steps(runDir)
			return "", usagef("%s has no checkpoint for --step %d (no %s); steps saved: %s", runDir, step, dir, stepList(saved))
		}
		return dir, nil
	}
	if b, err := os.ReadFile(filepath.Join(runDir, runs.LatestFile)); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			return filepath.Join(runDir, runs.StepDir(n)), nil
		}
	}
	steps, _ := runs.Steps(runDir)
	if len(steps) == 0 {
		return "", usagef("%s holds no global_step_N checkpoint; give the run directory of a Tinker run", runDir)
	}
	return filepath.Join(runDir, runs.StepDir(steps[len(steps)-1])), nil
}

// stepList names steps in a message: "1, 2, 5", or "none".
func stepList(steps []int) string {
	if len(steps) == 0 {
		return "none"
	}
	names := make([]string, len(steps))
	for i, n := range steps {
		names[i] = strconv.Itoa(n)
	}
	return strings.Join(names, ", ")
}
