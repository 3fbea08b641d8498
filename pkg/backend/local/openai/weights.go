package openai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// updateWeightsRequest is SGLang's UpdateWeightFromDiskReqInput.
type updateWeightsRequest struct {
	ModelPath        string  `json:"model_path"`
	LoadFormat       *string `json:"load_format"`
	WeightVersion    *string `json:"weight_version"`
	AbortAllRequests bool    `json:"abort_all_requests"`
}

var updateWeightsKeys = keySet("model_path", "load_format", "weight_version", "abort_all_requests", "flush_cache", "is_async", "torch_empty_cache", "keep_pause", "recapture_cuda_graph", "token_step")

type updateWeightsResponse struct {
	Success           bool   `json:"success"`
	Message           string `json:"message"`
	NumPausedRequests int    `json:"num_paused_requests"`
}

// updateWeightsFromDisk loads a checkpoint and makes it the weights of
// every later request; requests already received finish on the weights
// they started with. A failed load changes nothing.
func (s *Server) updateWeightsFromDisk(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		s.metrics.updates.WithLabelValues("false").Inc()
		if s.opts.Logf != nil {
			s.opts.Logf("weight update failed: %s", msg)
		}
		writeJSON(w, status, updateWeightsResponse{Success: false, Message: msg})
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		fail(http.StatusBadRequest, "reading the request body: %v", err)
		return
	}
	var keys map[string]json.RawMessage
	var req updateWeightsRequest
	if err := json.Unmarshal(raw, &keys); err != nil {
		fail(http.StatusBadRequest, "the request body is not a JSON object: %v", err)
		return
	}
	for k := range keys {
		if !updateWeightsKeys[k] {
			fail(http.StatusBadRequest, "parameter %q is not supported by /update_weights_from_disk; remove it", k)
			return
		}
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		fail(http.StatusBadRequest, "the request body does not match {model_path, weight_version?}: %v", err)
		return
	}
	if req.ModelPath == "" {
		fail(http.StatusBadRequest, "model_path is required: the checkpoint directory to load")
		return
	}
	if req.LoadFormat != nil && *req.LoadFormat != "" && *req.LoadFormat != "auto" && *req.LoadFormat != "safetensors" {
		fail(http.StatusBadRequest, "load_format %q is not supported; rllm serve loads rllm checkpoints (safetensors)", *req.LoadFormat)
		return
	}
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	// A model directory, a trainer's global_step_N or a run directory
	// (its newest step), as rllm serve --weights takes them.
	dir, err := runs.ResolveWeights("model_path", req.ModelPath)
	if err != nil {
		fail(http.StatusBadRequest, "%v; the old weights are kept", err)
		return
	}
	cur, _ := s.eng.Weights()
	want := cur.Config()
	snap, m, err := local.LoadSnapshotContext(r.Context(), dir, s.opts.ModelName, s.opts.Workers, &want)
	if err != nil {
		fail(http.StatusBadRequest, "loading %s failed, the old weights are kept: %v", req.ModelPath, err)
		return
	}
	_, version := s.eng.Weights()
	if req.WeightVersion != nil {
		version = *req.WeightVersion
	}
	if err := s.eng.SetWeights(snap, version); err != nil {
		fail(http.StatusBadRequest, "loading %s failed, the old weights are kept: %v", req.ModelPath, err)
		return
	}
	aborted := 0
	if req.AbortAllRequests {
		wasPaused := s.eng.Paused()
		aborted = s.eng.Pause(true)
		if !wasPaused {
			s.eng.Continue()
		}
	}
	s.metrics.updates.WithLabelValues("true").Inc()
	msg := fmt.Sprintf("Succeeded to update model weights from %s (%s), weight version %s.", dir, loadedStep(dir, m), version)
	if s.opts.Logf != nil {
		s.opts.Logf("%s", msg)
	}
	writeJSON(w, http.StatusOK, updateWeightsResponse{Success: true, Message: msg, NumPausedRequests: aborted})
}

func (s *Server) getWeightVersion(w http.ResponseWriter, _ *http.Request) {
	_, v := s.eng.Weights()
	writeJSON(w, http.StatusOK, map[string]string{"weight_version": v})
}

// pauseGeneration is SGLang's: mode "abort" (the default) ends every
// request with finish_reason "abort"; "in_place" and "retract" keep them,
// decoding stops until /continue_generation (retract does not recompute:
// paused sequences keep their caches and weights).
func (s *Server) pauseGeneration(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Mode string `json:"mode"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		writeError(w, http.StatusBadRequest, "", "reading the request body: %v", err)
		return
	}
	if len(strings.TrimSpace(string(raw))) > 0 {
		if err := json.Unmarshal(raw, &req); err != nil {
			writeError(w, http.StatusBadRequest, "", "the request body is not valid JSON: %v", err)
			return
		}
	}
	switch req.Mode {
	case "", "abort":
		s.eng.Pause(true)
	case "in_place", "retract":
		s.eng.Pause(false)
	default:
		writeError(w, http.StatusBadRequest, "mode", "mode is %q; use abort, in_place or retract", req.Mode)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation paused successfully.", "status": "ok"})
}

func (s *Server) continueGeneration(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<16))
	s.eng.Continue()
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation continued successfully.", "status": "ok"})
}

// loadedStep names the training step of a loaded checkpoint: the N of its
// global_step_N (a trainer checkpoint) or step_N (what the trainer
// publishes) directory, which is the trainer's step; else the manifest's
// optimizer step.
func loadedStep(dir string, m local.Manifest) string {
	for d := filepath.Clean(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		base := filepath.Base(d)
		if n, ok := runs.StepOf(base); ok {
			return fmt.Sprintf("step %d", n)
		}
		if rest, ok := strings.CutPrefix(base, "step_"); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 {
				return fmt.Sprintf("step %d", n)
			}
		}
		if base != runs.ModelDir {
			break // only the directory itself or its parent names a step
		}
	}
	return fmt.Sprintf("optimizer step %d", m.Step)
}
