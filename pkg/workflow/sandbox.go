package workflow

import (
	"time"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/sandbox"
)

// SandboxConfig reads the sandbox section into pkg/sandbox's settings.
func SandboxConfig(c *config.Config) sandbox.Config {
	s := c.Sandbox
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	return sandbox.Config{
		Backend: s.Backend, BindRO: s.BindRO, Env: s.Env, MaxConcurrent: s.MaxConcurrent, DockerImage: s.Docker.Image, DockerWarm: s.Docker.WarmPool,
		Limits: sandbox.Limits{
			WallTime: sec(s.Limits.WallTimeS), CPUTime: sec(s.Limits.CPUTimeS),
			MemoryBytes: int64(s.Limits.MemoryMB) << 20, Processes: s.Limits.Processes,
			FileSizeBytes: int64(s.Limits.FileSizeMB) << 20, OutputBytes: int64(s.Limits.OutputKB) << 10,
		},
	}
}
