package tinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/internal/ctxsleep"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// Service is which implementation of the Tinker API the backend talks
// to, told apart by the shape of two answers at start (no config key):
// SkyRL's client/config is a stub holding only pjwt_auth_enabled, and
// its get_server_capabilities lists model names without
// max_context_length (skyrl/tinker/api.py at a9564572,
// ClientConfigResponse and SupportedModel); hosted Tinker answers the
// SDK's flags and the context lengths. A service with neither (no
// client/config and no context lengths) is treated as SkyRL is: nothing
// it may ignore is relied on.
//
// What every service is spoken to alike, whatever the detection says:
// both sampler path forms, both archive routes, loads into fresh models,
// resends of saves refused as "already exists" taken as done once the
// checkpoint is listed.
type Service struct {
	// Name is "Tinker" or "SkyRL".
	Name string
	// SkyRL: ttl_seconds is dropped (every snapshot stays on the server's
	// disk), AdamParams has no grad_clip_norm, lora_config is rank and
	// seed only (targets fixed, alpha 32), saves and loads are not
	// de-duplicated by seq_id.
	SkyRL bool
}

func detectService(configFields int, caps wire.Capabilities) Service {
	withContext := false
	for _, m := range caps.SupportedModels {
		if m.MaxContextLength > 0 {
			withContext = true
		}
	}
	if configFields <= 1 && !withContext {
		return Service{Name: "SkyRL", SkyRL: true}
	}
	return Service{Name: "Tinker"}
}

// ignored lists, in one line, what the service drops of the settings
// asked for ("" when nothing).
func (s Service) ignored(o Options) string {
	if !s.SkyRL {
		return ""
	}
	var what []string
	if o.SamplerTTL > 0 {
		what = append(what, fmt.Sprintf("ttl_seconds (backend.tinker.sampler_ttl_s=%g: every step's sampler snapshot stays under its --checkpoints-base until deleted)", o.SamplerTTL.Seconds()))
	}
	if o.GradClipNorm > 0 {
		what = append(what, fmt.Sprintf("grad_clip_norm (actor.optim.grad_clip=%g: its JAX backend does not clip, FSDP/Megatron clip at their own trainer.policy.optimizer_config.max_grad_norm, 1.0 unless set in --backend-config)", o.GradClipNorm))
	}
	if !o.LoRA.TrainUnembed || !o.LoRA.TrainMLP || !o.LoRA.TrainAttn {
		what = append(what, fmt.Sprintf("train_unembed=%t train_mlp=%t train_attn=%t (its LoRA targets are fixed server-side)", o.LoRA.TrainUnembed, o.LoRA.TrainMLP, o.LoRA.TrainAttn))
	}
	what = append(what, "LoRA alpha (fixed at 32)")
	return "SkyRL ignores " + strings.Join(what, "; ")
}

// alreadyExists is a save refused because its checkpoint exists (SkyRL's
// create_checkpoint: 409 "Checkpoint 'NAME' already exists for model
// 'MODEL'").
func alreadyExists(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == http.StatusConflict && strings.Contains(he.Msg, "already exists")
}

// loadNotFirst is load_weights refused because the model has had a
// request (SkyRL api.py load_weights: 400 "LoadWeights is not permitted
// with seq_id N", "matching the Tinker service").
func loadNotFirst(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == http.StatusBadRequest && strings.Contains(he.Msg, "LoadWeights is not permitted")
}

// findCheckpoint waits until the model's checkpoint list holds name of
// kind (weights or sampler_weights) and returns the save's result for it:
// a save whose first attempt lost its answer, refused on resend as
// "already exists" because the first one took. The first attempt may
// still be running (the list shows finished checkpoints only), so the
// list is asked again, for up to request_timeout_s × (max_retries+1).
func (b *Backend) findCheckpoint(ctx context.Context, model, kind, name string) (json.RawMessage, error) {
	want := "training"
	if kind == "sampler_weights" {
		want = "sampler"
	}
	deadline := time.Now().Add(b.c.opts.RequestTimeout * time.Duration(b.c.opts.MaxRetries+1))
	for n := 1; ; n++ {
		data, err := b.c.call(ctx, http.MethodGet, wire.CheckpointsPath(model))
		if err != nil {
			return nil, fmt.Errorf("the resent save of %s was refused as already existing, and listing %s's checkpoints failed: %w", name, model, err)
		}
		var list wire.CheckpointList
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("%s at %s: the answer is not {checkpoints: [...]}: %v", wire.CheckpointsPath(model), b.c.BaseURL(), err)
		}
		for _, c := range list.Checkpoints {
			if c.CheckpointID == name && c.CheckpointType == want && strings.HasPrefix(c.TinkerPath, "tinker://") {
				b.c.logf("the resent save of %s was refused as already existing; its first attempt took (%s)", name, c.TinkerPath)
				return json.Marshal(wire.PathResult{Path: c.TinkerPath})
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the resent save of %s was refused as already existing, but %s's checkpoint list still lacks it after %s; restart from the last checkpoint", name, model, b.c.opts.RequestTimeout*time.Duration(b.c.opts.MaxRetries+1))
		}
		if err := ctxsleep.Sleep(ctx, min(b.c.pollDelay(n)*8, time.Second)); err != nil {
			return nil, err
		}
	}
}
