package faketinker

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

// Flavour is the service the fake answers as.
//
// Where the two differ (checked against SkyRL a9564572 skyrl/tinker/api.py
// and engine.py, and the Tinker SDK 0.25.0 d595dc2b):
//
//   - save_weights_for_sampler: SkyRL returns tinker://MODEL_ID/
//     CHECKPOINT_ID (engine.py process_save_weights_for_sampler), hosted
//     tinker://RUN/sampler_weights/NAME; asample takes both forms on SkyRL,
//     the long one only here for hosted.
//   - archives: SkyRL's route is training_runs/{id}/checkpoints/{ckpt}/
//     archive, a 302 to .../download; hosted's .../checkpoints/
//     sampler_weights/NAME/archive, a 302 to a signed URL.
//   - saves and loads: SkyRL registers a checkpoint's name when the save
//     arrives (create_checkpoint) and does not de-duplicate saves or loads
//     by seq_id (create_future is called without it), so a resend is a 409
//     "Checkpoint 'NAME' already exists for model 'MODEL'" (a load a 400);
//     hosted de-duplicates every training call by (model_id, seq_id).
//   - load_weights only as a model's first request, on both (api.py
//     load_weights, "matching the Tinker service"): else 400 "LoadWeights
//     is not permitted with seq_id N".
//   - get_server_capabilities: SkyRL lists model names only; hosted adds
//     max_context_length.
//   - client/config: SkyRL's is a stub ({pjwt_auth_enabled: false}) and it
//     has no auth/token; hosted may sign in with JWTs (Options.JWT).
//   - a failed request: SkyRL answers retrieve_future with HTTP 400
//     {detail}; hosted with {error, category}.
//   - what SkyRL silently drops, the fake refuses, so that a test proves
//     the client does not rely on it: ttl_seconds, grad_clip_norm,
//     lora_config's train_unembed/train_mlp/train_attn.
//
// Both refuse fields neither service's types have (a misspelt name), and a
// JSON forward_backward carrying forward_only, which hosted Tinker ignores
// on the JSON path (SDK 0.22.3 resources/training.py): that pass would
// train.
type Flavour string

// The flavours.
const (
	FlavourTinker Flavour = "tinker"
	FlavourSkyRL  Flavour = "skyrl"
)

func (s *Server) skyrl() bool { return s.opts.Flavour == FlavourSkyRL }

func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Flavour is the service the fake answers as.
func (s *Server) Flavour() Flavour { return s.opts.Flavour }

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
}

// authenticate checks a request's X-API-Key: "" when accepted, else the
// 401's detail. SkyRL checks no key; the fake does when Options.APIKey is
// set, so tests see the key sent.
func (s *Server) authenticate(name, key string) string {
	if s.opts.APIKey == "" {
		return ""
	}
	switch {
	case name == "healthz", name == "client/config":
		// Feature flags, asked before any credential is settled (SkyRL's
		// is a stub that reads no key).
		return ""
	case name == "auth/token" || !s.opts.JWT || s.skyrl():
		if key == s.opts.APIKey {
			return ""
		}
		return "Invalid API key"
	}
	if s.jwtLive(key) {
		return ""
	}
	return "Invalid JWT"
}

func (s *Server) jwtLive(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.jwts[key]
	return ok && s.now().Before(exp)
}

// clientConfig is POST client/config: SkyRL's stub, or hosted Tinker's
// flags (the SDK 0.25 ClientConfigResponse fields).
func (s *Server) clientConfig(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
		return
	}
	if s.skyrl() {
		writeJSON(w, 200, map[string]bool{"pjwt_auth_enabled": false})
		return
	}
	var req wire.ClientConfigRequest
	if err := decodeStrict(body, &req); err != nil || req.SDKVersion == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "client/config takes {sdk_version}"})
		return
	}
	source := "api_key"
	if s.opts.CredentialCmd {
		source = "credential_cmd"
	}
	writeJSON(w, 200, map[string]any{
		"pjwt_auth_enabled": s.opts.JWT, "credential_default_source": source,
		"parallel_fwdbwd_chunks": true, "proto_compress_fwdbwd": false,
		"fwdbwd_max_chunk_len": 1024, "fwdbwd_max_chunk_bytes_count": 5_000_000,
	})
}

// authToken is POST auth/token {}: hosted Tinker's JWT exchange.
func (s *Server) authToken(w http.ResponseWriter, r *http.Request, body []byte) {
	if s.skyrl() || !s.opts.JWT {
		notFound(w)
		return
	}
	if r.Method != http.MethodPost || string(body) != "{}" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "auth/token takes POST {}"})
		return
	}
	exp := s.now().Add(s.opts.JWTLife)
	claims, _ := json.Marshal(map[string]any{"exp": float64(exp.UnixMilli()) / 1000, "sub": "rllm-test"})
	sig := make([]byte, 16)
	rand.Read(sig)
	jwt := "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(claims) + "." + hex.EncodeToString(sig)
	s.mu.Lock()
	s.jwts[jwt] = exp
	s.exchanges++
	s.mu.Unlock()
	writeJSON(w, 200, wire.AuthTokenResponse{JWT: jwt})
}

// JWTExchanges counts the JWTs issued.
func (s *Server) JWTExchanges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exchanges
}

// listCheckpoints is GET training_runs/{run}/checkpoints: the finished
// checkpoints (SkyRL api.py list_checkpoints; the SDK's
// CheckpointsListResponse), tinker_path in the long form on both.
func (s *Server) listCheckpoints(w http.ResponseWriter, run string) {
	s.mu.Lock()
	_, ok := s.models[run]
	var out []wire.CheckpointEntry
	for p := range s.finished {
		r, kind, name, _ := parseTinkerPath(p, false)
		if r != run {
			continue
		}
		typ := "training"
		if kind == "sampler_weights" {
			typ = "sampler"
		}
		out = append(out, wire.CheckpointEntry{CheckpointID: name, CheckpointType: typ, TinkerPath: p})
	}
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Model not found"})
		return
	}
	slices.SortFunc(out, func(a, b wire.CheckpointEntry) int {
		if a.TinkerPath < b.TinkerPath {
			return -1
		}
		return 1
	})
	if out == nil {
		out = []wire.CheckpointEntry{}
	}
	writeJSON(w, 200, wire.CheckpointList{Checkpoints: out})
}

// RevokeJWTs makes every JWT issued so far invalid (a service that stops
// taking a token before its expiry).
func (s *Server) RevokeJWTs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.jwts)
}
