package trainer

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/episodestore"
	"github.com/rllm-org/rllm-go/pkg/runs"
)

// EpisodesPlan is which episodes a run keeps, and where
// (trainer.episodes, trainer.rollout_data_dir, trainer.validation_data_dir).
type EpisodesPlan struct {
	TrainDir, ValDir string
	// SaveFreq keeps every Nth step's training episodes (-1: none, nor
	// validation's); MaxGroups bounds the groups kept a step (0: all);
	// MaxBytes is the budget of every episode file (0: none).
	SaveFreq, MaxGroups int
	MaxBytes            int64
}

func episodesPlan(c *config.Config, runDir string) EpisodesPlan {
	t := c.Trainer
	p := EpisodesPlan{
		TrainDir: episodestore.PhaseDir(runDir, episodestore.PhaseTrain),
		ValDir:   episodestore.PhaseDir(runDir, episodestore.PhaseVal),
		SaveFreq: t.Episodes.SaveFreq,
	}
	if t.RolloutDataDir != nil && *t.RolloutDataDir != "" {
		p.TrainDir = filepath.Clean(*t.RolloutDataDir)
	}
	if t.ValidationDataDir != nil && *t.ValidationDataDir != "" {
		p.ValDir = filepath.Clean(*t.ValidationDataDir)
	}
	if t.Episodes.MaxGroups != nil {
		p.MaxGroups = *t.Episodes.MaxGroups
	}
	if t.Episodes.MaxMB != nil {
		p.MaxBytes = int64(*t.Episodes.MaxMB) << 20
	}
	return p
}

// recordConfig writes the run's configuration for rllm view to compare
// runs by (runs.ConfigFile); a resumed run writes the one it resumes with.
func recordConfig(dir string, c *config.Config, total int) error {
	if c == nil {
		return nil
	}
	b, err := json.MarshalIndent(runs.RunConfig{TotalSteps: total, Config: c}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, runs.ConfigFile), append(b, '\n'))
}

// episodeKeeper writes the episodes the plan keeps (pkg/episodestore).
type episodeKeeper struct {
	plan   EpisodesPlan
	decode episodestore.Decoder
	logf   func(format string, args ...any)
	used   int64
	off    bool // the budget is spent, or a write failed
	// step and kept count the groups kept of the step being written
	// (an asynchronous step prepares several mini-batches).
	step, kept int
}

// openEpisodes starts keeping episodes after the step a run starts from
// (resumedAt, -1 for a fresh run): the files of the steps it redoes go,
// those before stay and count against the budget.
func (t *Trainer) openEpisodes(resumedAt int) error {
	k := &episodeKeeper{plan: t.plan.Episodes, logf: t.logf, step: -1}
	if t.be != nil {
		if codec := t.be.Codec(); codec != nil {
			k.decode = cachedDecoder(codec.Decode)
		}
	}
	t.episodes = k
	if k.plan.SaveFreq < 0 {
		return nil
	}
	for _, dir := range []string{k.plan.TrainDir, k.plan.ValDir} {
		if _, err := episodestore.RemoveAfter(dir, resumedAt); err != nil {
			return fmt.Errorf("removing the episodes of the steps the run redoes: %w", err)
		}
		_, n, err := episodestore.Steps(dir)
		if err != nil {
			return err
		}
		k.used += n
	}
	return nil
}

// keepTrain writes the groups a training step trains on (with their
// samples as the update sees them), on the plan's cadence and bounds.
func (k *episodeKeeper) keepTrain(step int, groups []Group) {
	if k == nil || k.off || k.plan.SaveFreq < 0 || step%k.plan.SaveFreq != 0 {
		return
	}
	if step != k.step {
		k.step, k.kept = step, 0
	}
	var recs []*episodestore.Record
	for gi := range groups {
		if k.plan.MaxGroups > 0 && k.kept >= k.plan.MaxGroups {
			break
		}
		k.kept++
		g := &groups[gi]
		for _, ep := range g.Episodes {
			if ep == nil {
				continue
			}
			rec := &episodestore.Record{Step: step, Phase: episodestore.PhaseTrain, Group: k.kept - 1, Episode: episodestore.Compact(ep)}
			for si := range g.Samples {
				if s := &g.Samples[si]; s.EpisodeID == ep.ID {
					rec.Samples = append(rec.Samples, storedSample(ep, s))
				}
			}
			recs = append(recs, rec)
		}
	}
	k.write(k.plan.TrainDir, step, recs)
}

// keepVal writes a validation's episodes.
func (k *episodeKeeper) keepVal(step int, eps []*episode.Episode) {
	if k == nil || k.off || k.plan.SaveFreq < 0 {
		return
	}
	recs := make([]*episodestore.Record, 0, len(eps))
	for _, ep := range eps {
		if ep != nil {
			recs = append(recs, &episodestore.Record{Step: step, Phase: episodestore.PhaseVal, Episode: *ep})
		}
	}
	k.write(k.plan.ValDir, step, recs)
}

func (k *episodeKeeper) write(dir string, step int, recs []*episodestore.Record) {
	if len(recs) == 0 {
		return
	}
	f, err := episodestore.Create(dir, step)
	if err != nil {
		k.stop("cannot write episodes: %v", err)
		return
	}
	defer func() {
		if err := f.Close(); err != nil {
			k.stop("cannot write episodes: %v", err)
		}
	}()
	for _, rec := range recs {
		if k.plan.MaxBytes > 0 && k.used >= k.plan.MaxBytes {
			k.stop("the episode files reached trainer.episodes.max_mb=%d at step %d; no more episodes are kept (raise it, or keep fewer with trainer.episodes.save_freq and max_groups)", k.plan.MaxBytes>>20, step)
			return
		}
		episodestore.AddPieces(rec, k.decode)
		n, err := f.Write(rec)
		if err != nil {
			k.stop("cannot write episodes to %s: %v", dir, err)
			return
		}
		k.used += n
	}
}

func (k *episodeKeeper) stop(format string, args ...any) {
	k.off = true
	if k.logf != nil {
		k.logf("note: "+format, args...)
	}
}

// storedSample is s as the store keeps it; its trajectory is found by id
// (then name) in ep.
func storedSample(ep *episode.Episode, s *Sample) episodestore.Sample {
	ti := 0
	for i, tr := range ep.Trajectories {
		if (s.TrajectoryID != "" && tr.ID == s.TrajectoryID) || (s.TrajectoryID == "" && tr.Name == s.TrajectoryName) {
			ti = i
			break
		}
	}
	return episodestore.Sample{
		Trajectory: ti, Step: s.Step, PromptIDs: s.PromptIDs, ResponseIDs: s.ResponseIDs,
		Logprobs: s.Logprobs, LossMask: s.LossMask, Advantage: s.Advantage, Advantages: s.TokenAdvantages,
		Reward: s.Reward, Masked: s.Masked, Termination: s.Reason, TokenMismatch: s.TokenMismatch,
	}
}

// cachedDecoder decodes each token id once per run (the keeper decodes
// one id at a time, the same ids step after step).
func cachedDecoder(decode episodestore.Decoder) episodestore.Decoder {
	cache := map[int]string{}
	return func(ids []int, skipSpecial bool) (string, error) {
		if len(ids) != 1 || skipSpecial {
			return decode(ids, skipSpecial)
		}
		if s, ok := cache[ids[0]]; ok {
			return s, nil
		}
		s, err := decode(ids, false)
		if err == nil && len(cache) < 1<<20 {
			cache[ids[0]] = s
		}
		return s, err
	}
}
