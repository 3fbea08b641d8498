//go:build !unix

package hub

import "time"

func selfCPU() time.Duration    { return 0 }
func procCPU(int) time.Duration { return 0 }
