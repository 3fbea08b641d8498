// Package trainer is rllm's AgentTrainer: the training loop that ties the
// other packages together.
//
// One step, as DESIGN.md draws it:
//
//  1. take data.train_batch_size tasks from the resumable loader;
//  2. run rollout.n episodes per task through the workflow engine, sampling
//     from the newest published weights;
//  3. turn episodes into training sequences (exact sampled tokens, loss
//     masks, sampling logprobs) and apply the filters;
//  4. compute advantages per group of episodes of one task (pkg/ppo);
//  5. for each of actor.ppo_epochs passes and each mini-batch: a forward
//     pass for the current logprobs, the policy loss and its gradient in
//     pkg/ppo, then forward_backward with cross_entropy weights = −gradient
//     (so any loss runs on any backend that speaks the Tinker API), then
//     optim_step;
//  6. publish the new weights to the sampler, log metrics, validate and
//     checkpoint on their cadence.
package trainer
