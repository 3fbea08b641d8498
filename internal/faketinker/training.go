package faketinker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// trainingRequest is any seq_id-ordered call, decoded into the client's
// own wire type for its endpoint (package wire), so the two never
// disagree on a name.
type trainingRequest struct {
	ModelID              string
	SeqID                int
	ForwardBackwardInput *wire.ForwardBackwardInput
	ForwardInput         *wire.ForwardBackwardInput
	Adam                 backend.AdamParams
	GradClipSent         bool
	Path                 string
	Optimizer            bool
	TTLSeconds           *int
}

// required names the fields each call must carry (dotted for a nested
// one): a zero value in the wire type cannot tell them missing.
var required = map[string][]string{
	"create_model":             {"session_id", "base_model", "lora_config.rank"},
	"asample":                  {"sampling_params.max_tokens", "sampling_params.stop"},
	"forward_backward":         {"model_id", "seq_id"},
	"forward":                  {"model_id", "seq_id"},
	"optim_step":               {"model_id", "seq_id", "adam_params.learning_rate", "adam_params.beta1", "adam_params.beta2", "adam_params.eps"},
	"save_weights":             {"model_id", "seq_id", "path"},
	"save_weights_for_sampler": {"model_id", "seq_id", "path"},
	"load_weights":             {"model_id", "seq_id", "path", "optimizer"},
}

// decodeTraining reads a training call's body strictly into its wire type
// (see decodeCall) and keeps what prepare needs.
func decodeTraining(path string, body []byte) (r *trainingRequest, typ string, err error) {
	r = &trainingRequest{}
	switch path {
	case "forward_backward", "forward":
		err = decodeInto(path, body, func(w *wire.ForwardBackwardRequest) {
			typ, r.ModelID, r.SeqID, r.ForwardBackwardInput, r.ForwardInput = w.Type, w.ModelID, w.SeqID, w.ForwardBackwardInput, w.ForwardInput
		})
	case "optim_step":
		err = decodeInto(path, body, func(w *wire.OptimStepRequest) {
			typ, r.ModelID, r.SeqID, r.Adam = w.Type, w.ModelID, w.SeqID, w.AdamParams.Backend()
			r.GradClipSent = w.AdamParams.GradClipNorm != nil
		})
	case "save_weights", "save_weights_for_sampler":
		err = decodeInto(path, body, func(w *wire.SaveWeightsRequest) {
			typ, r.ModelID, r.SeqID, r.Path, r.TTLSeconds = w.Type, w.ModelID, w.SeqID, w.Path, w.TTLSeconds
		})
	case "load_weights":
		err = decodeInto(path, body, func(w *wire.LoadWeightsRequest) {
			typ, r.ModelID, r.SeqID, r.Path, r.Optimizer = w.Type, w.ModelID, w.SeqID, w.Path, w.Optimizer
		})
	}
	if err != nil {
		return nil, "", err
	}
	return r, typ, nil
}

// decodeInto decodes call name's body into T (see decodeCall) and hands
// it to keep.
func decodeInto[T any](name string, body []byte, keep func(*T)) error {
	w, err := decodeCall[T](name, body)
	if err == nil {
		keep(w)
	}
	return err
}

// requireFields checks that body (a JSON object) holds every field, a
// dotted name reaching into nested objects.
func requireFields(body []byte, fields ...string) error {
	for _, f := range fields {
		cur := body
		for _, part := range strings.Split(f, ".") {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cur, &m); err != nil {
				return fmt.Errorf("%s is required", f)
			}
			v, ok := m[part]
			if !ok || string(v) == "null" {
				return fmt.Errorf("%s is required", f)
			}
			cur = v
		}
	}
	return nil
}

// lossKeys are the loss_fn_inputs each loss reads; anything else is a
// 400 so that tests catch a client sending keys a loss does not use.
var lossKeys = map[string][]string{
	backend.LossCrossEntropy:       {"target_tokens", "weights"},
	backend.LossImportanceSampling: {"target_tokens", "logprobs", "advantages"},
	backend.LossPPO:                {"target_tokens", "logprobs", "advantages"},
	backend.LossCISPO:              {"target_tokens", "logprobs", "advantages"},
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// training handles the seq_id-ordered calls.
func (s *Server) training(path string, w http.ResponseWriter, _ *http.Request, body []byte) {
	if path == "forward_backward" && (requireFields(body, "forward_only") == nil || requireFields(body, "forward_backward_input.forward_only") == nil) {
		// Hosted Tinker reads forward_only only from the protobuf body
		// (SDK 0.22.3 resources/training.py: "silently ignored on the
		// JSON path"): this pass would train.
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "forward_only is not a field of the JSON forward_backward (the service would run the backward pass); use forward"})
		return
	}
	req, typ, err := decodeTraining(path, body)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": err.Error()})
		return
	}
	if typ != "" && typ != path {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": fmt.Sprintf("type %q sent to %s", typ, path)})
		return
	}
	if req.SeqID < 1 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "seq_id is required and starts at 1"})
		return
	}
	seq := req.SeqID
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[req.ModelID]
	if m == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "model " + req.ModelID + " not found"})
		return
	}
	if msg := s.skyrlDrops(path, req); msg != "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": msg})
		return
	}
	h := hashBody(body)
	// SkyRL de-duplicates only forward, forward_backward and optim_step
	// by (model_id, seq_id): saves and loads call create_future without
	// the seq_id (api.py at a9564572), so a resend is a new request.
	dedup := !s.skyrl() || path == "forward_backward" || path == "forward" || path == "optim_step"
	if path == "load_weights" && (m.next > 1 || len(m.bySeq) > 0) && (!dedup || m.bySeq[seq] == nil) {
		// api.py load_weights: only as the model's first request.
		badRequest(w, "LoadWeights is not permitted with seq_id %d", seq)
		return
	}
	if s.skyrl() && (path == "save_weights" || path == "save_weights_for_sampler") {
		// api.py create_checkpoint registers the name now: a second save
		// of it (a resend included) is refused at once.
		kind := "weights"
		if path == "save_weights_for_sampler" {
			kind = "sampler_weights"
		}
		key := "tinker://" + m.id + "/" + kind + "/" + req.Path
		if s.reserved[key] {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": fmt.Sprintf("Checkpoint '%s' already exists for model '%s'", req.Path, m.id)})
			return
		}
		if nameRE.MatchString(req.Path) {
			s.reserved[key] = true
		}
	}
	if e := m.bySeq[seq]; e != nil && !dedup {
		writeJSON(w, http.StatusConflict, map[string]string{"detail": "Training request sequence number was reused"})
		return
	}
	if e := m.bySeq[seq]; e != nil {
		if e.hash != h {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": fmt.Sprintf("seq_id %d was already used with a different request", seq)})
			return
		}
		// A retry: a new request id for the same run.
		s.nextID++
		id := fmt.Sprintf("req-%d", s.nextID)
		s.futures[id] = e.fut
		markDup(w)
		writeJSON(w, 200, wire.SubmitResponse{RequestID: id, ModelID: m.id})
		return
	}
	run, err := s.prepare(m, path, req)
	var se *submitError
	if errors.As(err, &se) {
		writeJSON(w, se.status, map[string]string{"detail": se.msg})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": err.Error()})
		return
	}
	f := s.newFuture(path)
	e := &entry{path: path, hash: h, fut: f, run: run}
	m.bySeq[seq] = e
	s.drain(m)
	writeJSON(w, 200, wire.SubmitResponse{RequestID: f.id, ModelID: m.id})
}

// drain queues, in seq_id order, every request whose predecessors have
// all been queued; the model's worker runs the queue one by one.
func (s *Server) drain(m *model) {
	for {
		e := m.bySeq[m.next]
		if e == nil {
			return
		}
		s.execs = append(s.execs, Execution{ModelID: m.id, SeqID: m.next, Path: e.path, Failed: e.fut.failed != nil})
		m.next++
		m.queue = append(m.queue, e)
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// work runs a model's queued requests in order until the server closes.
func (s *Server) work(m *model) {
	for {
		s.mu.Lock()
		if len(m.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-m.wake:
				continue
			case <-s.closing:
				return
			}
		}
		e := m.queue[0]
		m.queue = m.queue[1:]
		s.mu.Unlock()
		if e.fut.failed != nil {
			resolve(e.fut, nil, nil)
			continue
		}
		if d := s.opts.TrainingLatency + s.opts.Delays.trainDelay(e.path); d > 0 {
			select {
			case <-time.After(d):
			case <-s.closing:
				return
			}
		}
		v, err := e.run()
		resolve(e.fut, v, err)
	}
}

// prepare checks a request against the wire shapes and returns the work
// to run when its turn comes.
func (s *Server) prepare(m *model, path string, req *trainingRequest) (func() (any, error), error) {
	ctx := context.Background()
	lb := m.lb
	switch path {
	case "forward_backward", "forward":
		in := req.ForwardBackwardInput
		if path == "forward" {
			in = req.ForwardInput
		}
		if in == nil || (req.ForwardBackwardInput != nil && req.ForwardInput != nil) {
			return nil, fmt.Errorf("%s needs exactly its own input field", path)
		}
		if n := len(in.Data); n > MaxChunkDatums {
			return nil, fmt.Errorf("%s takes at most %d datums per request, got %d; split the batch as the SDK does", path, MaxChunkDatums, n)
		}
		numbers := 0
		for _, d := range in.Data {
			for _, c := range d.ModelInput.Chunks {
				numbers += len(c.Tokens)
			}
			for _, t := range d.LossFnInputs {
				numbers += len(t.Data)
			}
		}
		if numbers > MaxChunkNumbers && len(in.Data) > 1 {
			return nil, fmt.Errorf("%s takes at most %d numbers per request, got %d; split the batch as the SDK does", path, MaxChunkNumbers, numbers)
		}
		loss, data, err := s.datums(in)
		if err != nil {
			return nil, err
		}
		return func() (any, error) {
			var f *backend.Future[backend.ForwardBackwardOutput]
			if path == "forward" {
				f = lb.Forward(ctx, data, loss)
			} else {
				f = lb.ForwardBackward(ctx, data, loss)
			}
			out, err := f.Result(ctx)
			if err != nil {
				return nil, err
			}
			outs := make([]wire.LossFnOutputWire, len(out.LossFnOutputs))
			for i, o := range out.LossFnOutputs {
				outs[i] = wire.LossFnOutputWire{
					"logprobs":         {Data: f32(o.Logprobs), Dtype: "float32", Shape: []int{len(o.Logprobs)}},
					"elementwise_loss": {Data: f32(o.ElementwiseLoss), Dtype: "float32", Shape: []int{len(o.ElementwiseLoss)}},
				}
			}
			return wire.ForwardBackwardResult{LossFnOutputType: "ArrayRecord", LossFnOutputs: outs,
				Metrics: map[string]float64{"loss:sum": out.Metrics["loss:sum"]}}, nil
		}, nil
	case "optim_step":
		p := req.Adam
		if p.Eps <= 0 {
			return nil, errors.New("adam_params.eps must be > 0")
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		return func() (any, error) {
			out, err := lb.OptimStep(ctx, p).Result(ctx)
			if err != nil {
				return nil, err
			}
			return wire.OptimStepResult{Metrics: out.Metrics}, nil
		}, nil
	case "save_weights", "save_weights_for_sampler":
		if !nameRE.MatchString(req.Path) {
			return nil, errors.New("path must match ^[a-zA-Z0-9_-]+$")
		}
		name := req.Path
		kind := "weights"
		if path == "save_weights_for_sampler" {
			kind = "sampler_weights"
		}
		dir := s.checkpointDir(m.id, kind, name)
		tinker := "tinker://" + m.id + "/" + kind + "/" + name
		answer := tinker
		if kind == "sampler_weights" && s.skyrl() {
			// engine.py process_save_weights_for_sampler.
			answer = "tinker://" + m.id + "/" + name
		}
		if req.TTLSeconds != nil && *req.TTLSeconds < 1 {
			return nil, errors.New("ttl_seconds must be a positive number of seconds")
		}
		if kind == "sampler_weights" {
			ttl := 0
			if req.TTLSeconds != nil {
				ttl = *req.TTLSeconds
			}
			s.ttls = append(s.ttls, ttl)
		}
		return func() (any, error) {
			if _, err := os.Stat(dir); err == nil {
				return nil, fmt.Errorf("checkpoint %s already exists", tinker)
			}
			if _, err := lb.SaveState(ctx, dir).Result(ctx); err != nil {
				return nil, err
			}
			if kind == "sampler_weights" {
				snap, err := lb.PublishSampler(ctx, name).Result(ctx)
				if err != nil {
					return nil, err
				}
				s.mu.Lock()
				s.samplers[tinker] = snap
				s.mu.Unlock()
			}
			s.mu.Lock()
			s.finished[tinker] = true
			s.mu.Unlock()
			return wire.PathResult{Path: answer}, nil
		}, nil
	case "load_weights":
		run, kind, name, ok := parseTinkerPath(req.Path, false)
		if !ok || kind != "weights" {
			return nil, fmt.Errorf("%q is not a tinker://…/weights/… path", req.Path)
		}
		dir := s.checkpointDir(run, kind, name)
		if s.skyrl() && !s.finished[req.Path] {
			// api.py validate_checkpoint, before the request is queued.
			return nil, &submitError{status: http.StatusNotFound, msg: "Checkpoint not found: " + run + "/" + name}
		}
		withOpt := req.Optimizer
		return func() (any, error) {
			if _, err := os.Stat(dir); err != nil {
				return nil, fmt.Errorf("checkpoint %s not found", req.Path)
			}
			if _, err := lb.LoadState(ctx, dir, withOpt).Result(ctx); err != nil {
				return nil, err
			}
			return map[string]string{"type": "load_weights"}, nil
		}, nil
	}
	return nil, fmt.Errorf("request type %q does not match the endpoint", path)
}

// submitError is a request refused at submit with its own status.
type submitError struct {
	status int
	msg    string
}

func (e *submitError) Error() string { return e.msg }

// skyrlDrops is the refusal of a field SkyRL would silently drop ("" when
// none, or not SkyRL): the fake refuses it so that tests prove the client
// does not rely on it.
func (s *Server) skyrlDrops(path string, req *trainingRequest) string {
	if !s.skyrl() {
		return ""
	}
	switch {
	case req.TTLSeconds != nil:
		return "ttl_seconds: SkyRL's SaveWeightsForSamplerRequest has no such field (api.py at a9564572); it would keep the snapshot forever"
	case path == "optim_step" && req.GradClipSent:
		return "adam_params.grad_clip_norm: SkyRL's AdamParams has no such field (api.py at a9564572); gradients would not be clipped"
	}
	return ""
}

func f32(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(float32(x))
	}
	return out
}

// datums checks and converts the wire datums.
func (s *Server) datums(in *wire.ForwardBackwardInput) (backend.Loss, []backend.Datum, error) {
	keys, ok := lossKeys[in.LossFn]
	if !ok || !s.lossSupported(in.LossFn) {
		return backend.Loss{}, nil, fmt.Errorf("loss_fn %q is not supported", in.LossFn)
	}
	loss := backend.Loss{Name: in.LossFn, Config: in.LossFnConfig}
	if in.LossFnConfig != nil && (in.LossFn == backend.LossCrossEntropy || in.LossFn == backend.LossImportanceSampling) {
		return loss, nil, fmt.Errorf("loss_fn %s takes no loss_fn_config", in.LossFn)
	}
	if err := loss.Validate(); err != nil {
		return loss, nil, err
	}
	data := make([]backend.Datum, len(in.Data))
	for i, d := range in.Data {
		var input []int
		for _, c := range d.ModelInput.Chunks {
			if c.Type != "encoded_text" {
				return loss, nil, fmt.Errorf("datum %d: chunk type %q", i, c.Type)
			}
			input = append(input, c.Tokens...)
		}
		n := len(input)
		if n > s.opts.Model.Context {
			return loss, nil, fmt.Errorf("datum %d: %d tokens exceed the context of %d", i, n, s.opts.Model.Context)
		}
		get := func(key, dtype string) ([]float64, error) {
			t, ok := d.LossFnInputs[key]
			if !ok {
				return nil, nil
			}
			if t.Dtype != dtype || len(t.Shape) != 1 || t.Shape[0] != n || len(t.Data) != n {
				return nil, fmt.Errorf("datum %d: %s must be %s of shape [%d], got %s %v with %d values", i, key, dtype, n, t.Dtype, t.Shape, len(t.Data))
			}
			for _, x := range t.Data {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return nil, fmt.Errorf("datum %d: %s holds %v", i, key, x)
				}
			}
			return t.Data, nil
		}
		for k := range d.LossFnInputs {
			if !contains(keys, k) {
				return loss, nil, fmt.Errorf("datum %d: loss_fn_inputs key %q is not used by %s", i, k, in.LossFn)
			}
		}
		tt, err := get("target_tokens", "int64")
		if err != nil {
			return loss, nil, err
		}
		if tt == nil {
			return loss, nil, fmt.Errorf("datum %d: target_tokens missing", i)
		}
		dt := backend.Datum{Input: input, LossFnInputs: backend.LossFnInputs{TargetTokens: make([]int, n)}}
		for j, x := range tt {
			if x != math.Trunc(x) || x < 0 || x >= local.TokenizerVocab {
				return loss, nil, fmt.Errorf("datum %d: target token %v outside the vocabulary", i, x)
			}
			dt.LossFnInputs.TargetTokens[j] = int(x)
		}
		li := &dt.LossFnInputs
		if li.Weights, err = get("weights", "float32"); err != nil {
			return loss, nil, err
		}
		if li.Logprobs, err = get("logprobs", "float32"); err != nil {
			return loss, nil, err
		}
		if li.Advantages, err = get("advantages", "float32"); err != nil {
			return loss, nil, err
		}
		if err := dt.Validate(i, local.TokenizerVocab, s.opts.Model.Context, loss); err != nil {
			return loss, nil, err
		}
		data[i] = dt
	}
	return loss, data, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func (s *Server) lossSupported(name string) bool {
	if s.opts.Losses == nil {
		return true
	}
	return contains(s.opts.Losses, name)
}

// sample handles asample: not ordered with training.
func (s *Server) sample(w http.ResponseWriter, _ *http.Request, body []byte) {
	req, err := decodeCall[wire.SampleRequestWire]("asample", body)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": err.Error()})
		return
	}
	sp := req.SamplingParams
	if (req.ModelPath == "") == (req.BaseModel == "") {
		badRequest(w, "give exactly one of model_path and base_model")
		return
	}
	params := backend.SamplingParams{MaxTokens: sp.MaxTokens, Temperature: sp.Temperature, TopP: sp.TopP, TopK: max(sp.TopK, 0), Seed: sp.Seed}
	// stop is a list of token ids or of strings, never a bare string.
	if stop, _ := json.Marshal(sp.Stop); len(stop) > 0 && string(stop) != "null" {
		var ids []int
		var strs []string
		if err := json.Unmarshal(stop, &ids); err == nil {
			params.StopTokenIDs = ids
		} else if err := json.Unmarshal(stop, &strs); err == nil {
			params.Stop = strs
		} else {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "stop must be a list of token ids or of strings"})
			return
		}
	}
	var prompt []int
	for _, c := range req.Prompt.Chunks {
		prompt = append(prompt, c.Tokens...)
	}
	modelPath := req.ModelPath
	if modelPath != "" {
		// SkyRL takes both forms (api.py asample); hosted only its own.
		run, kind, name, ok := parseTinkerPath(modelPath, s.skyrl())
		if !ok || kind != "sampler_weights" {
			badRequest(w, "model_path must be tinker://model_id/sampler_weights/checkpoint_id, got %q", modelPath)
			return
		}
		modelPath = "tinker://" + run + "/" + kind + "/" + name
	}
	s.mu.Lock()
	snap := s.base
	if modelPath != "" {
		snap = s.samplers[modelPath]
	} else if req.BaseModel != BaseModel {
		snap = nil
	}
	f := s.newFuture("asample")
	s.mu.Unlock()
	if snap == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "unknown model_path or base_model"})
		return
	}
	n := req.NumSamples
	go func() {
		time.Sleep(s.opts.Delays.Sample)
		res, err := snap.Sample(context.Background(), backend.SampleRequest{Prompt: prompt, NumSamples: n, Params: params})
		if err != nil {
			resolve(f, nil, err)
			return
		}
		seqs := make([]map[string]any, len(res.Sequences))
		for i, q := range res.Sequences {
			seqs[i] = map[string]any{"tokens": q.Tokens, "logprobs": f32(q.Logprobs), "stop_reason": q.StopReason}
		}
		resolve(f, map[string]any{"type": "sample", "sequences": seqs}, nil)
	}()
	writeJSON(w, 200, map[string]string{"request_id": f.id})
}
