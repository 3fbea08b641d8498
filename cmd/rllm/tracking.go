package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"

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
