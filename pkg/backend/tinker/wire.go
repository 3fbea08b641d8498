package tinker

import "github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"

// The Tinker API's wire shapes live in pkg/backend/tinker/wire, shared with
// the fake service of the tests; these names keep the client's code short.

// Paths of the calls and the prefix of every path (see package wire).
const (
	PathCapabilities    = wire.PathCapabilities
	PathHealthz         = wire.PathHealthz
	PathCreateSession   = wire.PathCreateSession
	PathHeartbeat       = wire.PathHeartbeat
	PathCreateModel     = wire.PathCreateModel
	PathGetInfo         = wire.PathGetInfo
	PathUnloadModel     = wire.PathUnloadModel
	PathForwardBackward = wire.PathForwardBackward
	PathForward         = wire.PathForward
	PathOptimStep       = wire.PathOptimStep
	PathSaveWeights     = wire.PathSaveWeights
	PathLoadWeights     = wire.PathLoadWeights
	PathSaveForSampler  = wire.PathSaveForSampler
	PathSample          = wire.PathSample
	PathRetrieveFuture  = wire.PathRetrieveFuture
	APIPrefix           = wire.APIPrefix
)

// Wire shapes (see package wire).
type (
	TensorData             = wire.TensorData
	ModelInputChunk        = wire.ModelInputChunk
	ModelInput             = wire.ModelInput
	WireDatum              = wire.WireDatum
	ForwardBackwardInput   = wire.ForwardBackwardInput
	ForwardBackwardRequest = wire.ForwardBackwardRequest
	LossFnOutputWire       = wire.LossFnOutputWire
	ForwardBackwardResult  = wire.ForwardBackwardResult
	AdamParamsWire         = wire.AdamParamsWire
	OptimStepRequest       = wire.OptimStepRequest
	OptimStepResult        = wire.OptimStepResult
	SaveWeightsRequest     = wire.SaveWeightsRequest
	PathResult             = wire.PathResult
	LoadWeightsRequest     = wire.LoadWeightsRequest
	LoRAConfig             = wire.LoRAConfig
	CreateModelRequest     = wire.CreateModelRequest
	ModelIDResult          = wire.ModelIDResult
	CreateSessionRequest   = wire.CreateSessionRequest
	CreateSessionResponse  = wire.CreateSessionResponse
	SessionRequest         = wire.SessionRequest
	ModelRequest           = wire.ModelRequest
	SamplingParamsWire     = wire.SamplingParamsWire
	SampleRequestWire      = wire.SampleRequestWire
	SampledSequenceWire    = wire.SampledSequenceWire
	SampleResultWire       = wire.SampleResultWire
	SubmitResponse         = wire.SubmitResponse
	RetrieveFutureRequest  = wire.RetrieveFutureRequest
	TryAgain               = wire.TryAgain
	FailedResult           = wire.FailedResult
	SupportedModel         = wire.SupportedModel
	Capabilities           = wire.Capabilities
	ModelInfoWire          = wire.ModelInfoWire
)

// CheckpointPath is wire.CheckpointPath.
func CheckpointPath(run, kind, name string) string { return wire.CheckpointPath(run, kind, name) }
