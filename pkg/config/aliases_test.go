package config

import (
	"slices"
	"strings"
	"testing"
)

// The spellings rLLM's and verl's scripts use, each read as rllm's key
// (the value lands where the plan reads it), named in a notice as having
// no effect, or refused with why.
func TestRLLMAndVerlSpellings(t *testing.T) {
	f := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	tests := []struct {
		name    string
		args    []string
		check   func(c *Config) bool
		notice  string // a notice that must appear
		wantErr string // an error that must appear
	}{
		{name: "rllm.trainer.*", args: []string{"rllm.trainer.total_epochs=3", "rllm.trainer.test_freq=7"},
			check: func(c *Config) bool { return c.Trainer.TotalEpochs == 3 && c.Trainer.TestFreq == 7 }},
		{name: "rllm.algorithm.*", args: []string{"rllm.algorithm.adv_estimator=rloo", "rllm.algorithm.norm_adv_by_std_in_grpo=false"},
			check: func(c *Config) bool { return c.Algorithm.AdvEstimator == "rloo" && !c.Algorithm.NormAdvByStdInGRPO }},
		{name: "model.name and lora_rank", args: []string{"rllm/backend=tinker", "model.name=Qwen/Qwen3-8B", "model.lora_rank=16"},
			check: func(c *Config) bool {
				return c.Backend.Name == "tinker" && c.Backend.Tinker.BaseModel == "Qwen/Qwen3-8B" && c.Backend.Tinker.LoRARank == 16
			}},
		{name: "training.* and validation.*", args: []string{"training.group_size=16", "training.learning_rate=4e-5", "validation.group_size=2"},
			check: func(c *Config) bool {
				return c.Rollout.N == 16 && f(c.Actor.Optim.LR) == 4e-5 && c.Rollout.ValKwargs.N == 2
			}},
		{name: "sampling.*", args: []string{"sampling.train.temperature=0.7", "sampling.val.temperature=0.3", "sampling.val.top_p=0.9"},
			check: func(c *Config) bool {
				return c.Rollout.Temperature == 0.7 && c.Rollout.ValKwargs.Temperature == 0.3 && c.Rollout.ValKwargs.TopP == 0.9
			}},
		{name: "sampling without phase", args: []string{"sampling.temperature=0.5", "sampling.top_p=0.8"},
			check: func(c *Config) bool { return c.Rollout.Temperature == 0.5 && c.Rollout.TopP == 0.8 }},
		{name: "rllm.rollout.train/val", args: []string{"rllm.rollout.train.temperature=0.6", "rllm.rollout.val.temperature=0.2"},
			check: func(c *Config) bool { return c.Rollout.Temperature == 0.6 && c.Rollout.ValKwargs.Temperature == 0.2 }},
		{name: "kl_ctrl.kl_coef", args: []string{"algorithm.kl_ctrl.kl_coef=0.05"},
			check: func(c *Config) bool { return c.Algorithm.KLCoef == 0.05 }},
		{name: "verl model path on tinker", args: []string{"backend.name=tinker", "actor_rollout_ref.model.path=Qwen/Qwen3-4B", "actor_rollout_ref.model.lora_rank=8"},
			check: func(c *Config) bool {
				return c.Backend.Tinker.BaseModel == "Qwen/Qwen3-4B" && c.Backend.Tinker.LoRARank == 8
			}},
		{name: "one train file as a string", args: []string{"data.train_files=/data/train.parquet", "data.val_files=/data/test.parquet"},
			check: func(c *Config) bool {
				return slices.Equal(c.Data.TrainFiles, []string{"/data/train.parquet"}) && slices.Equal(c.Data.ValFiles, []string{"/data/test.parquet"})
			}},
		{name: "logger list as verl quotes it", args: []string{"trainer.logger=['console','jsonl']"},
			check: func(c *Config) bool { return slices.Equal(c.Trainer.Logger, []string{"console", "jsonl"}) }},
		{name: "placement keys grouped", args: []string{"actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.mode=async", "trainer.n_gpus_per_node=8",
			"actor_rollout_ref.actor.fsdp_config.param_offload=True", "trainer.default_hdfs_dir=null", "actor_rollout_ref.actor.ppo_micro_batch_size=16"},
			notice: "these 6 keys place and run the model on GPUs"},
		{name: "what rllm does anyway", args: []string{"actor_rollout_ref.rollout.val_kwargs.do_sample=True", "reward_model.enable=False", "data.truncation=left"},
			notice: "these 3 keys ask for what rllm does anyway"},
		{name: "critic without gae", args: []string{"algorithm.adv_estimator=grpo", "trainer.critic_warmup=0", "critic.strategy=fsdp2"},
			notice: "configure verl's critic"},
		{name: "critic for verl's default gae", args: []string{"critic.optim.lr=1e-5"}, wantErr: "critic.optim.lr: verl trains a critic"},
		{name: "greedy validation", args: []string{"actor_rollout_ref.rollout.val_kwargs.do_sample=False"}, wantErr: "rollout.val_kwargs.temperature=0"},
		{name: "reward model", args: []string{"reward_model.enable=True"}, wantErr: "a reward model is not supported"},
		{name: "rollout_rs with an old verl mode", args: []string{"algorithm.rollout_correction.rollout_rs=token"}, wantErr: `has the unknown criterion "token"; use one or more (comma-separated) of token_k1`},
		{name: "verl's rollout correction", args: []string{"algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.rollout_is_batch_normalize=true",
			"algorithm.rollout_correction.rollout_rs=token_k1,seq_max_k2", "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0,0.1",
			"algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.loss_type=reinforce"},
			check: func(c *Config) bool {
				rc := c.Algorithm.RolloutCorrection
				return *rc.RolloutIS == "sequence" && rc.RolloutISBatchNormalize && *rc.RolloutRS == "token_k1,seq_max_k2" &&
					*rc.RolloutRSThreshold == "0.5_2.0,0.1" && *rc.BypassMode && rc.LossType == "reinforce"
			}},
		{name: "rollout_rs_threshold as a number", args: []string{"algorithm.rollout_correction.rollout_rs=token_k2", "algorithm.rollout_correction.rollout_rs_threshold=2.0"},
			check: func(c *Config) bool { return *c.Algorithm.RolloutCorrection.RolloutRSThreshold == "2.0" }},
		{name: "loss_type unknown", args: []string{"algorithm.rollout_correction.loss_type=vanilla"}, wantErr: "loss_type: must be one of ppo_clip, reinforce"},
		{name: "dapo reward manager", args: []string{"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
			"+reward_model.reward_kwargs.overlong_buffer_cfg.len=512", "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.5",
			"+reward_model.reward_kwargs.overlong_buffer_cfg.log=True", "+reward_model.reward_kwargs.max_resp_len=2048"},
			check: func(c *Config) bool {
				r := c.Reward
				return r.Manager == "dapo" && r.OverlongBuffer == OverlongBuffer{Enable: true, Len: 512, PenaltyFactor: 1.5, Log: true} && *r.MaxRespLen == 2048 &&
					c.EffectiveMaxRespLen() == 2048
			}},
		{name: "dapo buffer off", args: []string{"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=false",
			"+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096"},
			check: func(c *Config) bool {
				return !c.Reward.OverlongBuffer.Enable && c.EffectiveMaxRespLen() == c.Data.MaxResponseLength
			}},
		{name: "other reward managers", args: []string{"reward_model.reward_manager=prime"}, wantErr: `reward.manager: is "prime", a verl reward manager rllm does not have`},
		{name: "overlong buffer without dapo", args: []string{"+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"},
			wantErr: "reward.overlong_buffer.enable: is set, but reward.manager is naive"},
		{name: "other reward kwargs", args: []string{"reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.format_score=0.1"}, wantErr: "reward_model.reward_kwargs.format_score: of the reward managers' arguments rllm has the dapo manager's"},
		{name: "buffer longer than the response", args: []string{"reward_model.reward_manager=dapo", "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
			"reward_model.reward_kwargs.overlong_buffer_cfg.len=4096", "data.max_response_length=1024"}, wantErr: "reward.overlong_buffer.len: (4096) is longer than data.max_response_length (1024)"},
		{name: "buffer of no length", args: []string{"reward_model.reward_manager=dapo", "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true"},
			wantErr: "reward.overlong_buffer.len: must be at least 1"},
		{name: "multi-turn tool config", args: []string{"actor_rollout_ref.rollout.multi_turn.tool_config_path=x.yaml"}, wantErr: "multi-turn tool config is not supported"},
		{name: "remote runtime", args: []string{"rllm.remote_runtime.enabled=true"}, wantErr: "a remote runtime"},
		{name: "long prompts dropped", args: []string{"data.filter_overlong_prompts=True", "data.truncation=error"},
			check: func(c *Config) bool { return c.Data.FilterOverlongPrompts }, notice: "data.truncation"},
		{name: "truncation=error alone", args: []string{"data.truncation=error"}, wantErr: "data.truncation: rllm keeps the last"},
		{name: "model path on the local backend", args: []string{"actor_rollout_ref.model.path=Qwen/Qwen3-4B"}, wantErr: "backend.name=tinker"},
		{name: "rllm/backend=verl", args: []string{"rllm/backend=verl"}, wantErr: "rllm has no verl backend"},
		{name: "ui logger", args: []string{"trainer.logger=[console,ui]"}, notice: "rllm's is rllm view",
			check: func(c *Config) bool { return slices.Equal(c.Trainer.Logger, []string{"console", "jsonl"}) }},
		{name: "one logger as a plain string", args: []string{"trainer.logger=console"},
			check: func(c *Config) bool { return slices.Equal(c.Trainer.Logger, []string{"console"}) }},
		{name: "empty lr", args: []string{"actor.optim.lr="}, wantErr: "actor.optim.lr: is empty"},
		{name: "async keys without async", args: []string{"async_training.staleness_threshold=0.5", "rllm.async_training.partial_rollout=true"},
			wantErr: "async_training.staleness_threshold: is set, but async_training.enable is false"},
		{name: "async keys with async", args: []string{"async_training.enable=true", "async_training.staleness_threshold=0.5"},
			check: func(c *Config) bool { return c.AsyncTraining.StalenessThreshold == 0.5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ld, err := Load(Sources{Args: tt.args})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil && !tt.check(ld.Config) {
				t.Errorf("%v did not land where rllm reads it", tt.args)
			}
			if tt.notice != "" && !slices.ContainsFunc(ld.Notices, func(n string) bool { return strings.Contains(n, tt.notice) }) {
				t.Errorf("notices %q lack %q", ld.Notices, tt.notice)
			}
		})
	}
}

// A did-you-mean names the real counterpart: the hints that used to point
// elsewhere (rollout.name → agent.name, rollout.mode → rollout.model, ...)
// now find their row, and an unknown key under a known prefix still gets a
// hint of its own section.
func TestHintsNameTheCounterpart(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"actor_rollout_ref.rollout.name=vllm", "note"},
		{"actor_rollout_ref.rollout.mode=async", "note"},
		{"trainer.default_hdfs_dir=null", "note"},
		{"actor_rollout_ref.actor.ppo_micro_batch_size=4", "note"},
		{"model.name=Qwen/Qwen3-8B", "backend.tinker.base_model"},
		{"sampling.val.temperature=0.5", "rollout.val_kwargs.temperature"},
		{"training.group_size=4", "rollout.n"},
		{"reward_model.enable=True", "reward model is not supported"},
		{"algorithm.rollout_correction.rollout_rs=token", "use one or more (comma-separated) of token_k1"},
		{"actor_rollout_ref.actor.clip_ratio_hgh=0.2", "did you mean actor.clip_ratio_high"},
	} {
		ld, err := Load(Sources{Args: []string{tc.key, "backend.name=tinker"}})
		var text string
		if err != nil {
			text = err.Error()
		} else {
			text = strings.Join(ld.Notices, "\n")
			if tc.want == "note" {
				if !strings.Contains(text, "have no effect here") && !strings.Contains(text, "has no effect here") {
					t.Errorf("%s: notices %q name no group", tc.key, text)
				}
				continue
			}
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("%s: %q, want %q", tc.key, text, tc.want)
		}
	}
}
