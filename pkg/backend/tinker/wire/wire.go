// Package wire holds the Tinker API's wire shapes, shared by the client
// (pkg/backend/tinker) and the fake service of the tests
// (internal/faketinker), so the two can never disagree on a name.
package wire

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/rllm-org/rllm-go/pkg/backend"
)

// The Tinker API's wire shapes (see the Tinker SDK's types and SkyRL's
// server). Every path is under /api/v1/. Requests carry the `type` field
// recent SDKs send; servers ignore fields they do not know.

// Paths of the calls, relative to base_url/api/v1/.
const (
	PathCapabilities    = "get_server_capabilities"
	PathHealthz         = "healthz"
	PathCreateSession   = "create_session"
	PathHeartbeat       = "session_heartbeat"
	PathCreateModel     = "create_model"
	PathGetInfo         = "get_info"
	PathUnloadModel     = "unload_model"
	PathForwardBackward = "forward_backward"
	PathForward         = "forward"
	PathOptimStep       = "optim_step"
	PathSaveWeights     = "save_weights"
	PathLoadWeights     = "load_weights"
	PathSaveForSampler  = "save_weights_for_sampler"
	PathSample          = "asample"
	PathRetrieveFuture  = "retrieve_future"
	// PathClientConfig is the SDK's first call (SDK 0.25
	// internal_client_holder.py _fetch_client_config): the service's
	// feature flags, among them whether keys are exchanged for JWTs.
	PathClientConfig = "client/config"
	// PathAuthToken exchanges a key (or a TINKER_CREDENTIAL_CMD
	// credential) for a short-lived JWT (SDK 0.25 resources/service.py
	// auth_token, lib/_jwt_auth.py).
	PathAuthToken = "auth/token"
)

// CheckpointPath is the REST route of one checkpoint, relative to
// base_url/api/v1/: DELETE removes it (the SDK's
// RestClient.delete_checkpoint). kind is "weights" or "sampler_weights".
func CheckpointPath(run, kind, name string) string {
	return "training_runs/" + url.PathEscape(run) + "/checkpoints/" + kind + "/" + url.PathEscape(name)
}

// CheckpointsPath lists a training run's finished checkpoints (GET; the
// SDK's RestClient.list_checkpoints; SkyRL api.py list_checkpoints).
func CheckpointsPath(run string) string {
	return "training_runs/" + url.PathEscape(run) + "/checkpoints"
}

// ArchivePath is hosted Tinker's archive route of a checkpoint, as the
// SDK 0.25 builds it (resources/weights.py get_checkpoint_archive_url,
// checkpoint_id "sampler_weights/NAME"): a 302 to a signed URL.
func ArchivePath(run, kind, name string) string {
	return CheckpointPath(run, kind, name) + "/archive"
}

// SkyRLArchivePath is SkyRL's archive route (skyrl/tinker/api.py at
// a9564572, get_checkpoint_archive_url): one checkpoint_id segment, sampler
// checkpoints only, a 302 to .../download.
func SkyRLArchivePath(run, name string) string {
	return "training_runs/" + url.PathEscape(run) + "/checkpoints/" + url.PathEscape(name) + "/archive"
}

// APIPrefix starts every path.
const APIPrefix = "/api/v1/"

// TensorData is a flat tensor: data in row-major order, its dtype
// ("int64" or "float32") and shape.
type TensorData struct {
	Data  []float64 `json:"data"`
	Dtype string    `json:"dtype"`
	Shape []int     `json:"shape"`
}

// ModelInputChunk is one chunk of a model input; rllm sends only
// encoded_text chunks.
type ModelInputChunk struct {
	Type   string `json:"type"`
	Tokens []int  `json:"tokens"`
}

// ModelInput is a prompt or a training input.
type ModelInput struct {
	Chunks []ModelInputChunk `json:"chunks"`
}

// WireDatum is a Datum as the server reads it.
type WireDatum struct {
	ModelInput   ModelInput            `json:"model_input"`
	LossFnInputs map[string]TensorData `json:"loss_fn_inputs"`
}

// ForwardBackwardInput is forward_backward_input / forward_input.
type ForwardBackwardInput struct {
	Data         []WireDatum        `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config,omitempty"`
}

// ForwardBackwardRequest is the body of forward_backward and forward
// (one of the two inputs is set).
type ForwardBackwardRequest struct {
	Type                 string                `json:"type"`
	ModelID              string                `json:"model_id"`
	SeqID                int                   `json:"seq_id"`
	ForwardBackwardInput *ForwardBackwardInput `json:"forward_backward_input,omitempty"`
	ForwardInput         *ForwardBackwardInput `json:"forward_input,omitempty"`
}

// LossFnOutputWire is one datum's outputs.
type LossFnOutputWire map[string]TensorData

// ForwardBackwardResult is the future's result of forward_backward.
type ForwardBackwardResult struct {
	LossFnOutputType string             `json:"loss_fn_output_type"`
	LossFnOutputs    []LossFnOutputWire `json:"loss_fn_outputs"`
	Metrics          map[string]float64 `json:"metrics"`
}

// OptimStepRequest is the body of optim_step.
type OptimStepRequest struct {
	Type       string     `json:"type"`
	ModelID    string     `json:"model_id"`
	SeqID      int        `json:"seq_id"`
	AdamParams AdamParams `json:"adam_params"`
}

// AdamParams are adam_params: the SDK's AdamParams (types/
// optim_step_request.py). GradClipNorm is left out for SkyRL, whose
// AdamParams has no such field (skyrl/tinker/api.py at a9564572).
type AdamParams struct {
	LearningRate float64  `json:"learning_rate"`
	Beta1        float64  `json:"beta1"`
	Beta2        float64  `json:"beta2"`
	Eps          float64  `json:"eps"`
	WeightDecay  float64  `json:"weight_decay"`
	GradClipNorm *float64 `json:"grad_clip_norm,omitempty"`
}

// NewAdamParams is p on the wire; withClip sends grad_clip_norm.
func NewAdamParams(p backend.AdamParams, withClip bool) AdamParams {
	w := AdamParams{LearningRate: p.LearningRate, Beta1: p.Beta1, Beta2: p.Beta2, Eps: p.Eps, WeightDecay: p.WeightDecay}
	if withClip {
		c := p.GradClipNorm
		w.GradClipNorm = &c
	}
	return w
}

// Backend is the backend's type (grad_clip_norm absent is 0: no clipping).
func (w AdamParams) Backend() backend.AdamParams {
	p := backend.AdamParams{LearningRate: w.LearningRate, Beta1: w.Beta1, Beta2: w.Beta2, Eps: w.Eps, WeightDecay: w.WeightDecay}
	if w.GradClipNorm != nil {
		p.GradClipNorm = *w.GradClipNorm
	}
	return p
}

// OptimStepResult is optim_step's result.
type OptimStepResult struct {
	Metrics map[string]float64 `json:"metrics,omitempty"`
}

// SaveWeightsRequest is the body of save_weights and
// save_weights_for_sampler; TTLSeconds, when set, has the service delete
// the weights after that long.
type SaveWeightsRequest struct {
	Type       string `json:"type"`
	ModelID    string `json:"model_id"`
	SeqID      int    `json:"seq_id"`
	Path       string `json:"path"`
	TTLSeconds *int   `json:"ttl_seconds,omitempty"`
}

// PathResult is the result of save_weights and save_weights_for_sampler.
type PathResult struct {
	Path string `json:"path"`
}

// LoadWeightsRequest is the body of load_weights.
type LoadWeightsRequest struct {
	Type      string `json:"type"`
	ModelID   string `json:"model_id"`
	SeqID     int    `json:"seq_id"`
	Path      string `json:"path"`
	Optimizer bool   `json:"optimizer"`
}

// LoRAConfig is create_model's lora_config.
type LoRAConfig struct {
	Rank         int    `json:"rank"`
	Seed         *int64 `json:"seed,omitempty"`
	TrainUnembed bool   `json:"train_unembed"`
	TrainMLP     bool   `json:"train_mlp"`
	TrainAttn    bool   `json:"train_attn"`
}

// SkyRLLoRAConfig is the lora_config SkyRL reads (skyrl/tinker/api.py at
// a9564572, LoRAConfig: rank and seed; the targets are fixed server-side
// and alpha is 32).
type SkyRLLoRAConfig struct {
	Rank int    `json:"rank"`
	Seed *int64 `json:"seed,omitempty"`
}

// CreateModelRequest is the body of create_model. LoRAConfig is a
// LoRAConfig, or a SkyRLLoRAConfig for SkyRL.
type CreateModelRequest struct {
	Type       string `json:"type"`
	SessionID  string `json:"session_id"`
	ModelSeqID int    `json:"model_seq_id"`
	BaseModel  string `json:"base_model"`
	LoRAConfig any    `json:"lora_config"`
}

// ModelIDResult is create_model's result.
type ModelIDResult struct {
	ModelID string `json:"model_id"`
}

// ClientConfigRequest is the body of client/config.
type ClientConfigRequest struct {
	SDKVersion string `json:"sdk_version"`
}

// ClientConfigResponse is what rllm reads of client/config's flags (the
// SDK's ClientConfigResponse; SkyRL answers only pjwt_auth_enabled false).
type ClientConfigResponse struct {
	PJWTAuthEnabled bool `json:"pjwt_auth_enabled"`
	// CredentialDefaultSource is "api_key" or "credential_cmd" (the key
	// is then ignored unless it is already a JWT).
	CredentialDefaultSource string `json:"credential_default_source,omitempty"`
}

// AuthTokenResponse is auth/token's answer.
type AuthTokenResponse struct {
	JWT string `json:"jwt"`
}

// CheckpointEntry is one entry of a training run's checkpoint list.
type CheckpointEntry struct {
	CheckpointID   string `json:"checkpoint_id"`
	CheckpointType string `json:"checkpoint_type"` // "training" or "sampler"
	TinkerPath     string `json:"tinker_path"`
}

// CheckpointList is the answer of CheckpointsPath.
type CheckpointList struct {
	Checkpoints []CheckpointEntry `json:"checkpoints"`
}

// CreateSessionRequest is the body of create_session.
type CreateSessionRequest struct {
	Tags         []string          `json:"tags"`
	UserMetadata map[string]string `json:"user_metadata"`
	SDKVersion   string            `json:"sdk_version"`
}

// CreateSessionResponse is create_session's (immediate) answer.
type CreateSessionResponse struct {
	SessionID      string `json:"session_id"`
	InfoMessage    string `json:"info_message,omitempty"`
	WarningMessage string `json:"warning_message,omitempty"`
	ErrorMessage   string `json:"error_message,omitempty"`
}

// SessionRequest is the body of session_heartbeat.
type SessionRequest struct {
	SessionID string `json:"session_id"`
}

// ModelRequest is the body of get_info and unload_model.
type ModelRequest struct {
	Type    string `json:"type,omitempty"`
	ModelID string `json:"model_id"`
}

// SamplingParamsWire are sampling_params. Stop is always a list (token
// ids or strings, never a bare string); MaxTokens is always sent.
type SamplingParamsWire struct {
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
	TopK        int     `json:"top_k"`
	TopP        float64 `json:"top_p"`
	Stop        any     `json:"stop"`
	Seed        *int64  `json:"seed,omitempty"`
}

// SampleRequestWire is the body of asample.
type SampleRequestWire struct {
	Type           string             `json:"type"`
	Prompt         ModelInput         `json:"prompt"`
	NumSamples     int                `json:"num_samples"`
	SamplingParams SamplingParamsWire `json:"sampling_params"`
	ModelPath      string             `json:"model_path,omitempty"`
	BaseModel      string             `json:"base_model,omitempty"`
}

// SampledSequenceWire is one returned sequence.
type SampledSequenceWire struct {
	Tokens     []int     `json:"tokens"`
	Logprobs   []float64 `json:"logprobs"`
	StopReason string    `json:"stop_reason"`
}

// SampleResultWire is asample's result.
type SampleResultWire struct {
	Sequences []SampledSequenceWire `json:"sequences"`
}

// SubmitResponse is the immediate answer to a queued call.
type SubmitResponse struct {
	RequestID string `json:"request_id"`
	ModelID   string `json:"model_id,omitempty"`
}

// RetrieveFutureRequest is the body of retrieve_future.
type RetrieveFutureRequest struct {
	RequestID string `json:"request_id"`
}

// TryAgain is retrieve_future's answer for a pending request.
type TryAgain struct {
	Type       string `json:"type"`
	RequestID  string `json:"request_id"`
	QueueState string `json:"queue_state"`
}

// FailedResult is a request that failed: category is user, server or
// unknown.
type FailedResult struct {
	Error    string `json:"error"`
	Category string `json:"category"`
}

// SupportedModel is one entry of get_server_capabilities.
type SupportedModel struct {
	ModelName        string `json:"model_name"`
	MaxContextLength int    `json:"max_context_length,omitempty"`
}

// UnmarshalJSON also accepts a bare model name, which some servers send.
func (m *SupportedModel) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*m = SupportedModel{ModelName: name}
		return nil
	}
	type plain SupportedModel
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("a supported_models entry is neither a name nor {model_name, max_context_length}: %w", err)
	}
	*m = SupportedModel(p)
	return nil
}

// Capabilities is get_server_capabilities' answer. Neither hosted Tinker
// (SDK 0.25 GetServerCapabilitiesResponse) nor SkyRL lists losses;
// SupportedLossFns is read for a server that does.
type Capabilities struct {
	SupportedModels  []SupportedModel `json:"supported_models"`
	SupportedLossFns []string         `json:"supported_loss_fns,omitempty"`
}

// ModelInfoWire is get_info's answer.
type ModelInfoWire struct {
	ModelID   string `json:"model_id"`
	ModelData struct {
		Arch        string `json:"arch"`
		ModelName   string `json:"model_name"`
		TokenizerID string `json:"tokenizer_id"`
	} `json:"model_data"`
	IsLoRA    bool   `json:"is_lora"`
	LoRARank  int    `json:"lora_rank"`
	ModelName string `json:"model_name"`
}
