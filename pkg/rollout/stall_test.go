package rollout

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

type boundedWorkflow struct{ funcWorkflow }

func (boundedWorkflow) Bound() string { return "workflow.args.timeout_s=300 ends each episode" }

// An engine whose episodes run and never end says so, naming the
// oldest episode and the keys that bound it, instead of waiting in
// silence; one that finishes its episodes says nothing.
func TestStallReport(t *testing.T) {
	hang := funcWorkflow(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	quick := funcWorkflow(func(ctx context.Context, task episode.Task, id string) (*episode.Episode, error) {
		return doneEpisode(task, id), nil
	})
	for _, tc := range []struct {
		name    string
		wf      Workflow
		timeout time.Duration
		want    []string // empty: no report
	}{
		{"hangs", boundedWorkflow{hang}, 0, []string{"2 episodes running and none ended for", "the oldest, t0:", "has run", "; workflow.args.timeout_s=300 ends each episode"}},
		{"hangs with an engine timeout", hang, time.Hour, []string{"2 episodes running", "agent.trajectory_timeout_s=3600 ends an episode"}},
		{"hangs, nothing bounds it", hang, 0, []string{"no timeout ends an episode: agent.trajectory_timeout_s sets one"}},
		{"finishes", quick, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var said []string
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e, err := NewEngine(func() (Workflow, error) { return tc.wf, nil }, EngineOptions{N: 2, EpisodeTimeout: tc.timeout,
				StallAfter: 20 * time.Millisecond, OnStall: func(msg string) {
					mu.Lock()
					said = append(said, msg)
					mu.Unlock()
					cancel()
				}})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = e.Run(ctx, makeTasks(1))
			mu.Lock()
			defer mu.Unlock()
			if len(tc.want) == 0 {
				if len(said) > 0 {
					t.Fatalf("a phase whose episodes end reported a stall: %q", said)
				}
				return
			}
			if len(said) == 0 {
				t.Fatal("no stall report")
			}
			for _, w := range tc.want {
				if !strings.Contains(said[0], w) {
					t.Errorf("report %q lacks %q", said[0], w)
				}
			}
		})
	}
}
