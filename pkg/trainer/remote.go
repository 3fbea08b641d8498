package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/rollout"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// publishedDir holds, in the run directory, the weights handed to the
// inference servers: one directory per published step, the two newest
// kept (the newest serves new requests, the one before may still be
// loading on a slow server).
const publishedDir = "published"

// AdapterExporter is a backend whose policy is a LoRA adapter it can
// write as a PEFT directory (the Tinker backend), for inference servers
// that load adapters.
type AdapterExporter interface {
	ExportAdapter(ctx context.Context, dir string) error
}

// openRemote prepares rollouts from inference servers: the rollout
// client the program built and a publisher of each step's weights.
func (t *Trainer) openRemote() error {
	if !t.plan.Remote.Enabled {
		return nil
	}
	if t.opts.Rollouts == nil {
		return usererr.Errorf("rollout.engine: training on inference servers needs their client; run it through rllm train, or pass trainer.Options.Rollouts")
	}
	mode := t.plan.Remote.Mode
	if mode == rollout.PublishVLLMLoRA || mode == rollout.PublishSGLangLoRA {
		if _, ok := t.be.(AdapterExporter); !ok {
			return usererr.Errorf("rollout.engine: the %s backend cannot write its policy as a LoRA adapter for the inference servers; use rollout.engine=auto", t.plan.Backend)
		}
	}
	if mode == "" {
		return usererr.Errorf("rollout.engine: the %s backend has no way to publish its weights to inference servers; use rollout.engine=auto", t.plan.Backend)
	}
	p, err := rollout.NewWeightPublisher(rollout.PublisherOptions{
		Endpoints: t.plan.Remote.Endpoints, Mode: mode, APIKey: t.opts.APIKey,
		// The run's name in every LoRA name: runs sharing a server never
		// take each other's adapters.
		Prefix: rollout.LoRAPrefix(filepath.Base(t.plan.Dir)),
		Warn:   func(msg string) { t.logf("warning: %s", msg) },
		OnDrop: func(url string) { t.opts.Rollouts.Retire(url) },
	})
	if err != nil {
		return err
	}
	t.publisher = p
	return nil
}

// publishRemote writes the current policy where the servers can load it
// (a checkpoint directory, or a LoRA adapter), has every endpoint load it
// as version = step, and points new rollouts at it.
func (t *Trainer) publishRemote(ctx context.Context) error {
	root, err := filepath.Abs(filepath.Join(t.plan.Dir, publishedDir))
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "step_"+strconv.Itoa(t.step))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	path := dir
	switch t.plan.Remote.Mode {
	case rollout.PublishFullWeights:
		if path, err = t.be.SaveState(ctx, dir).Result(ctx); err != nil {
			return fmt.Errorf("saving the weights to publish: %w", err)
		}
	default:
		if err := t.be.(AdapterExporter).ExportAdapter(ctx, dir); err != nil {
			return fmt.Errorf("writing the LoRA adapter to publish: %w", err)
		}
	}
	model, err := t.publisher.Publish(ctx, t.step, path)
	if err != nil {
		return err
	}
	if model != "" {
		t.opts.Rollouts.SetModel(model)
	}
	t.chat.swap(t.opts.Rollouts)
	return prunePublished(root, t.step)
}

// prunePublished removes published directories older than the two
// newest, and what a killed export left behind (atomicfile's temporary
// directories: nothing else writes here while the trainer publishes).
func prunePublished(root string, step int) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "step_"))
		if (err == nil && n < step-1) || strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoteCheckpoints is a backend whose checkpoints also live on a service
// (the Tinker backend's tinker:// copies): pruning a local checkpoint
// (trainer.max_ckpt_to_keep) deletes its remote copies too.
type RemoteCheckpoints interface {
	DeleteCheckpoint(ctx context.Context, dir string) error
}

// deleteRemote deletes the remote copies of the checkpoint in stepDir
// before it is pruned; a failure costs storage, not the run, so it is a
// warning.
func (t *Trainer) deleteRemote(stepDir string) {
	rc, ok := t.be.(RemoteCheckpoints)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rc.DeleteCheckpoint(ctx, filepath.Join(stepDir, modelDir)); err != nil {
		t.logf("warning: pruning %s: %v", stepDir, err)
	}
}
