// Package hub is rllm's client of the Hugging Face Hub for datasets, and
// the catalog of datasets rllm knows how to pull (catalog.json, data, not
// code). It speaks the Hub's HTTP API as huggingface_hub does: metadata
// from /api/datasets, files through HEAD and GET on resolve URLs (relative
// redirects followed, a redirect to the LFS CDN on another host followed
// without the token), X-Error-Code errors, 429 Retry-After, Range resumes.
// Files land in Hugging Face's own cache (HF_HUB_CACHE):
//
//	datasets--ORG--NAME/blobs/<etag>               the bytes, named by git sha1 or LFS sha256
//	datasets--ORG--NAME/refs/<revision>            the commit a branch or tag resolved to
//	datasets--ORG--NAME/snapshots/<commit>/<path>  relative symlinks to the blobs
//	.locks/datasets--ORG--NAME/<etag>.lock         the lock a download holds
//
// so files Python downloaded are used as they are and files rllm pulled are
// there for Python. Every blob is checked against its ETag before use.
// The package reads no environment variable: the CLI passes HF_ENDPOINT,
// HF_TOKEN, HF_HUB_CACHE and HF_HUB_OFFLINE down in Client.
package hub
