package rollout

import (
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestFirstTurnEndings(t *testing.T) {
	replied := &episode.Episode{TerminationReason: episode.TerminationMaxPromptLength, Error: "sampling turn 3: refused",
		Trajectories: []episode.Trajectory{{Steps: []episode.Step{{ResponseIDs: []int{1}}}}}}
	refused := &episode.Episode{TerminationReason: episode.TerminationMaxPromptLength, Error: "sampling turn 1: http://x/v1/chat/completions answered 400 Bad Request: too long."}
	errored := &episode.Episode{TerminationReason: episode.TerminationError, Error: "boom"}
	done := &episode.Episode{TerminationReason: episode.TerminationEnvDone}
	cases := []struct {
		name   string
		eps    []*episode.Episode
		reason episode.TerminationReason // "" for none
	}{
		{"none", nil, ""},
		{"all done", []*episode.Episode{done, done}, ""},
		{"exactly half is not most", []*episode.Episode{refused, done}, ""},
		{"most refused", []*episode.Episode{refused, refused, done}, episode.TerminationMaxPromptLength},
		{"a later turn does not count", []*episode.Episode{replied, replied, refused}, ""},
		{"mixed abnormal endings are not one", []*episode.Episode{refused, errored, done}, ""},
		{"errors", []*episode.Episode{errored, errored, nil, refused}, episode.TerminationError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f FirstTurnEndings
			for _, ep := range tc.eps {
				f.Add(ep)
			}
			got, ok := f.Dominant()
			if ok != (tc.reason != "") || got.Reason != tc.reason {
				t.Fatalf("Dominant = %+v, %v; want %q", got, ok, tc.reason)
			}
			if ok && (!strings.Contains(got.String(), string(tc.reason)) || strings.Contains(got.String(), "..")) {
				t.Errorf("warning %q", got)
			}
		})
	}
	for _, tc := range []struct {
		ep   *episode.Episode
		want bool
	}{{refused, true}, {errored, true}, {done, false}, {replied, false},
		{&episode.Episode{TerminationReason: episode.TerminationTimeout}, true},
		{&episode.Episode{TerminationReason: episode.TerminationMaxPromptLength}, false}} {
		if got := Failed(tc.ep); got != tc.want {
			t.Errorf("Failed(%+v) = %v", tc.ep, got)
		}
		pt, rt := tokenCounts(tc.ep)
		ev := Event{Termination: tc.ep.TerminationReason, Err: tc.ep.Error, PromptTokens: pt, ResponseTokens: rt}
		if got := ev.Failed(); got != tc.want {
			t.Errorf("Event.Failed(%+v) = %v", ev, got)
		}
	}
}
