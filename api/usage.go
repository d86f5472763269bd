package api

import "time"

// Usage grouping for GET /v1/usage?group_by=.
const (
	UsageBySandbox = "sandbox"
	UsageByKey     = "key"
	UsageByDay     = "day"
)

// Usage is the answer of GET /v1/usage: what was used in [since, until),
// grouped, and priced at the configured prices.
type Usage struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// GroupBy is "sandbox", "key" or "day".
	GroupBy string      `json:"group_by"`
	Prices  UsagePrices `json:"prices"`
	// Usage holds one entry per group: sandboxes by name, keys by id,
	// days oldest first. Groups that used nothing are left out.
	Usage []UsageEntry `json:"usage"`
	// Total sums every entry (its group fields are empty).
	Total UsageEntry `json:"total"`
}

// UsageEntry is the usage of one group. Only the group's own field is set
// (Sandbox and SandboxID, Key, or Day).
type UsageEntry struct {
	// Sandbox and SandboxID name the sandbox (it may be gone).
	Sandbox   string `json:"sandbox,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	// Key is the id of the API key billed ("" for the operator's own
	// sandboxes, shown as "operator" by the CLI).
	Key string `json:"key,omitempty"`
	// Day is the UTC day, "2006-01-02".
	Day string `json:"day,omitempty"`
	// CPUSeconds is CPU time used (one core busy for a second is 1).
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemoryGiBSeconds is memory allocated while running (the sandbox's
	// memory_mb / 1024) times seconds running.
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	// StoredByteSeconds is checkpoint and snapshot bytes kept in the blob
	// store times seconds kept (a fork's own snapshot is not counted).
	StoredByteSeconds float64 `json:"stored_byte_seconds"`
	// Cost is in US dollars at Usage.Prices.
	Cost float64 `json:"cost"`
}

// UsagePrices are the configured prices, in US dollars.
type UsagePrices struct {
	// CPUHour is per vCPU-hour of CPU used (default 0.025).
	CPUHour float64 `json:"cpu_hour"`
	// MemoryGiBHour is per GiB-hour of memory allocated while running
	// (default 0.0075).
	MemoryGiBHour float64 `json:"memory_gib_hour"`
	// StorageGBMonth is per GB-month stored: 10^9 bytes kept for 30 days
	// (default 0.08).
	StorageGBMonth float64 `json:"storage_gb_month"`
}

// DefaultUsagePrices are the prices of sbx's pricing (API.md).
var DefaultUsagePrices = UsagePrices{CPUHour: 0.025, MemoryGiBHour: 0.0075, StorageGBMonth: 0.08}

// StorageMonthSeconds is the month of StorageGBMonth: 30 days, in seconds.
const StorageMonthSeconds = 30 * 24 * 3600

// Cost is the price in US dollars of cpuSeconds of CPU used,
// memoryGiBSeconds of memory allocated and storedByteSeconds stored.
func (p UsagePrices) Cost(cpuSeconds, memoryGiBSeconds, storedByteSeconds float64) float64 {
	return cpuSeconds/3600*p.CPUHour + memoryGiBSeconds/3600*p.MemoryGiBHour +
		storedByteSeconds/1e9/StorageMonthSeconds*p.StorageGBMonth
}

// KeyLimitRequest is the body of PUT /v1/keys/{id}/limit: it replaces the
// key's daily spending limit.
type KeyLimitRequest struct {
	// DailyLimitUSD is the spending limit per UTC day in US dollars, ≥ 0;
	// absent or null for none.
	DailyLimitUSD *float64 `json:"daily_limit_usd,omitempty"`
	// ResumeSuspended asks that the sandboxes this key's limit suspended
	// be resumed once the key is under its limit: at once if it is now,
	// else when the limit is raised or the UTC day turns.
	ResumeSuspended bool `json:"resume_suspended,omitempty"`
}
