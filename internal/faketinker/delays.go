package faketinker

import "time"

// Delays inject latency, to measure what overlaps what: Train is added to
// every forward_backward + optim_step pair (half to each, run serially by
// the model's worker, as a real training service runs them), Sample to
// every asample request (concurrently: each request waits on its own).
type Delays struct {
	Train, Sample time.Duration
}

// trainDelay is the pause before a queued training request runs.
func (d Delays) trainDelay(path string) time.Duration {
	switch path {
	case "forward_backward", "optim_step":
		return d.Train / 2
	}
	return 0
}
