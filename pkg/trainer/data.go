package trainer

import (
	"context"
	"strings"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/tasks"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// loadTasks returns the training and validation tasks: the caller's, the
// configured files, or rows the built-in task of env.name generates.
// Generated validation rows use another seed than the training rows. With
// no validation files and no generator there is no validation set.
func loadTasks(ctx context.Context, c *config.Config, opts Options) (train, val []episode.Task, err error) {
	train, err = taskSet(ctx, c, opts.TrainTasks, c.Data.TrainFiles, "data.train_files", c.Data.GeneratedTrainSize, uint64(c.Data.Seed))
	if err != nil {
		return nil, nil, err
	}
	if len(opts.ValTasks) == 0 && len(c.Data.ValFiles) == 0 {
		if _, ok := tasks.GeneratorFor(c.Env.Name); !ok || c.Workflow.UseWorkflow {
			return train, nil, nil // nothing to validate on: training runs without validation
		}
	}
	val, err = taskSet(ctx, c, opts.ValTasks, c.Data.ValFiles, "data.val_files", c.Data.GeneratedValSize, uint64(c.Data.Seed)+1)
	if err != nil {
		return nil, nil, err
	}
	return train, val, nil
}

func taskSet(ctx context.Context, c *config.Config, given []episode.Task, files []string, key string, n int, seed uint64) ([]episode.Task, error) {
	switch {
	case len(given) > 0:
		cp := make([]episode.Task, len(given))
		copy(cp, given)
		return cp, dataset.AssignIDs(key, cp)
	case len(files) > 0:
		files, err := catalog.ResolveFiles(c.Data.DatasetsDir, key, files) // registered dataset names → their files
		if err != nil {
			return nil, err
		}
		var all []episode.Task
		for _, f := range files {
			rows, err := dataset.ReadAll(ctx, f, dataset.Options{})
			if err != nil {
				return nil, err
			}
			all = append(all, rows...)
		}
		if len(all) == 0 {
			return nil, usererr.Errorf("%s: %s hold no tasks", key, strings.Join(files, ", "))
		}
		return all, dataset.AssignIDs(strings.Join(files, ", "), all)
	}
	if c.Workflow.UseWorkflow {
		return nil, usererr.Errorf("%s is empty, and with workflow.use_workflow=true tasks come from a dataset, not an env's generator; list task files or registered datasets in %s", key, key)
	}
	gen, ok := tasks.GeneratorFor(c.Env.Name)
	if !ok {
		return nil, usererr.Errorf("%s is empty and env %q cannot generate its own tasks (built-in generators: %s); list task files in %s",
			key, c.Env.Name, strings.Join(tasks.GeneratorNames(), ", "), key)
	}
	rows, err := gen(n, seed)
	if err != nil {
		return nil, err
	}
	return rows, dataset.AssignIDs(c.Env.Name+" generator", rows)
}
