//go:build !unix

package trainer

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
