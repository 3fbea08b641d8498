// Package tasks registers every built-in task (agents, envs and their
// reward functions): import it for its side effects, as a program imports
// a database/sql driver.
//
//	import _ "github.com/rllm-org/rllm-go/pkg/tasks"
package tasks

import (
	// Each registers its agent and env in init().
	_ "github.com/rllm-org/rllm-go/pkg/tasks/arith"
	_ "github.com/rllm-org/rllm-go/pkg/tasks/countdown"
	_ "github.com/rllm-org/rllm-go/pkg/tasks/frozenlake"
	_ "github.com/rllm-org/rllm-go/pkg/tasks/qa"
)
