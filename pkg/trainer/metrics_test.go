package trainer

import (
	"testing"

	"github.com/rllm-org/rllm-go/pkg/runs"
	"github.com/rllm-org/rllm-go/pkg/tracking"
)

// The run directory's metrics file is one name for the trackers that
// write it and the viewer that reads it.
func TestOneMetricsFileName(t *testing.T) {
	if tracking.MetricsFile != runs.MetricsFile {
		t.Fatalf("tracking writes %q, runs reads %q", tracking.MetricsFile, runs.MetricsFile)
	}
}
