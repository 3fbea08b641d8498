package exec

import (
	"context"
	"os"
	"time"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// rllmStandIn opens a pool whose env starts through a wrapper that leaves
// a grandchild, starts an episode, says so, and waits to be killed.
func rllmStandIn(pidFile string) {
	exe, _ := os.Executable()
	p := Params{Command: []string{"sh", "-c", "(sleep 120 & echo $! >> " + pidFile + "); echo $$ >> " + pidFile + "; exec " + exe + " -test.run=^$"},
		EnvVars: map[string]string{"EXEC_TEST_CHILD": "1"}, Processes: 1, StepTimeoutS: 20}
	pl := NewPool(p)
	e := pl.newEpisode(episode.Task{"id": "t1"})
	if _, _, err := e.Reset(context.Background()); err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(1)
	}
	if err := os.Rename(pidFile, pidFile+".ready"); err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(1)
	}
	time.Sleep(10 * time.Minute)
}
