package rollout

// SetModel makes later requests name model (a LoRA adapter the trainer
// just loaded, policy-vN). Requests in flight keep the name they were
// sent with.
func (c *Client) SetModel(model string) {
	c.modelMu.Lock()
	c.opts.Model = model
	c.modelMu.Unlock()
}

// model is the name requests send now.
func (c *Client) model() string {
	c.modelMu.RLock()
	defer c.modelMu.RUnlock()
	return c.opts.Model
}
