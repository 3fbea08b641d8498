package trainer

import (
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestAllFailed(t *testing.T) {
	crashed := &episode.Episode{ID: "t:0", TerminationReason: episode.TerminationError, Error: "program `a` exited with status 1; its stderr ends: ImportError: x"}
	timedOut := &episode.Episode{ID: "t:1", TerminationReason: episode.TerminationTimeout, Error: "ran longer than 5s"}
	replied := &episode.Episode{ID: "t:2", TerminationReason: episode.TerminationError, Error: "boom after a reply",
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ResponseIDs: []int{1}}}}}}
	done := &episode.Episode{ID: "t:3", TerminationReason: episode.TerminationEnvDone}
	tooLong := &episode.Episode{ID: "t:4", TerminationReason: episode.TerminationMaxPromptLength, Error: "the prompt is too long"}
	for _, tc := range []struct {
		name string
		eps  []*episode.Episode
		want []string // nil: no error
	}{
		{"none", nil, nil},
		{"one done", []*episode.Episode{crashed, done, crashed}, nil},
		{"prompts too long have their own warning", []*episode.Episode{tooLong, tooLong}, nil},
		{"all crashed", []*episode.Episode{crashed, crashed}, []string{"every episode failed: 2 of 2 episodes ended error before their first reply", "ImportError: x"}},
		{"errors and timeouts", []*episode.Episode{crashed, timedOut, replied}, []string{"every one of the 3 episodes ended in error or timeout; the first: t:0: program `a`", "ImportError: x"}},
	} {
		err := allFailed(tc.eps)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
}
