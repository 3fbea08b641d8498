package main

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/tracking"
)

// trackingSpec reads what the trackers trainer.logger names need from
// the environment, as their own clients read it: WANDB_* (and the
// ~/.netrc entry `wandb login` writes, or the file NETRC names) and
// MLFLOW_*. Nothing here is printed.
func trackingSpec(a *App) tracking.Spec {
	env := a.Getenv
	w := tracking.WandBSettings{
		APIKey: env("WANDB_API_KEY"), KeyFrom: "WANDB_API_KEY",
		BaseURL: env("WANDB_BASE_URL"), Entity: env("WANDB_ENTITY"), Project: env("WANDB_PROJECT"),
		Name: env("WANDB_NAME"), RunID: env("WANDB_RUN_ID"), Mode: strings.ToLower(strings.TrimSpace(env("WANDB_MODE"))),
	}
	for _, t := range strings.Split(env("WANDB_TAGS"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			w.Tags = append(w.Tags, t)
		}
	}
	if w.APIKey == "" {
		w.APIKey, w.KeyFrom = netrcKey(a, w.BaseURL)
	}
	m := tracking.MLflowSettings{
		TrackingURI: env("MLFLOW_TRACKING_URI"), Token: env("MLFLOW_TRACKING_TOKEN"),
		Username: env("MLFLOW_TRACKING_USERNAME"), Password: env("MLFLOW_TRACKING_PASSWORD"),
		ExperimentName: env("MLFLOW_EXPERIMENT_NAME"), RunID: env("MLFLOW_RUN_ID"),
	}
	host, _ := os.Hostname()
	return tracking.Spec{WandB: w, MLflow: m, Hostname: host, PID: os.Getpid()}
}

// netrcKey is the W&B key in the .netrc entry for the API's host, and
// where it came from.
func netrcKey(a *App, baseURL string) (key, from string) {
	if baseURL == "" {
		baseURL = tracking.DefaultWandBURL
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Hostname() == "" {
		return "", ""
	}
	path := a.Getenv("NETRC")
	if path == "" {
		home := a.Getenv("HOME")
		if home == "" {
			return "", ""
		}
		path = filepath.Join(home, ".netrc")
	}
	read := a.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	b, err := read(path)
	if err != nil || len(b) > 1<<20 {
		return "", ""
	}
	return tracking.NetrcPassword(string(b), u.Hostname()), "~/.netrc"
}

// openSideTracking opens, for rllm eval and rllm sft, the sinks of
// trainer.logger that watch runs elsewhere (tensorboard, wandb, mlflow):
// a new tracker run named <experiment_name>-<kind>, its files under
// <trainer.default_local_dir>/<kind>. It returns nil when trainer.logger
// names none of them (the command prints its own results; metrics.jsonl
// is the training run's).
func openSideTracking(ctx context.Context, a *App, c *config.Config, kind string) (*tracking.Set, error) {
	var loggers []string
	for _, l := range c.Trainer.Logger {
		if l == tracking.TensorBoard || l == tracking.WandB || l == tracking.MLflow {
			loggers = append(loggers, l)
		}
	}
	if len(loggers) == 0 {
		return nil, nil
	}
	spec := trackingSpec(a)
	spec.Loggers = loggers
	spec.Dir = filepath.Join(c.Trainer.DefaultLocalDir, kind)
	spec.Project, spec.Name = c.Trainer.ProjectName, c.Trainer.ExperimentName+"-"+kind
	spec.ResumedAt = -1
	spec.Notify = func(line string) { a.infof("%s", line) }
	b, _ := json.Marshal(c.Redacted())
	json.Unmarshal(b, &spec.Config)
	set, err := tracking.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := set.Ready(ctx); err != nil {
		closeSideTracking(ctx, set, err, nil)
		return nil, err
	}
	return set, nil
}

// closeSideTracking ends the side run: KILLED after Ctrl-C, FAILED after
// an error, within a bounded time.
func closeSideTracking(ctx context.Context, set *tracking.Set, err error, values map[string]float64) {
	if set == nil {
		return
	}
	st, wait := tracking.Finished, 30*time.Second
	switch {
	case err != nil && ctx.Err() != nil:
		st, wait = tracking.Killed, 10*time.Second
	case err != nil:
		st = tracking.Failed
	}
	fctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	set.Close(fctx, tracking.Summary{Status: st, Values: values})
}
