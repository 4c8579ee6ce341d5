package sqlstore

// migrations are the schema, one step per version (version = index + 1),
// each a list of statements. Append only: a released step is never
// edited. A database's pending steps run in one transaction together with
// their schema_migrations rows, so a schema is never half applied.
//
// The SQL is what SQLite and PostgreSQL share: TEXT and BIGINT columns
// only, times as BIGINT unix milliseconds UTC (0 = not set), money as
// BIGINT micro-dollars, JSON as TEXT, $N placeholders, ON CONFLICT DO
// NOTHING, no AUTOINCREMENT, no date functions (a usage event carries its
// UTC day as text, computed in Go).
var migrations = [][]string{
	// 1: keys, containers, files, usage.
	{`CREATE TABLE api_keys (
		id            TEXT PRIMARY KEY,
		account       TEXT NOT NULL,
		workspace     TEXT NOT NULL,
		secret_sha256 TEXT NOT NULL,
		created_at_ms BIGINT NOT NULL,
		revoked_at_ms BIGINT NOT NULL DEFAULT 0
	)`,
		`CREATE TABLE containers (
		id                TEXT PRIMARY KEY,
		account           TEXT NOT NULL,
		workspace         TEXT NOT NULL,
		name              TEXT NOT NULL,
		image             TEXT NOT NULL,
		cpu_millis        BIGINT NOT NULL,
		memory_bytes      BIGINT NOT NULL,
		processes         BIGINT NOT NULL,
		disk_bytes        BIGINT NOT NULL,
		network_policy    TEXT NOT NULL,
		status            TEXT NOT NULL,
		created_at_ms     BIGINT NOT NULL,
		last_active_at_ms BIGINT NOT NULL,
		expires_at_ms     BIGINT NOT NULL,
		UNIQUE (account, workspace, name)
	)`,
		`CREATE INDEX containers_by_scope ON containers (account, workspace, created_at_ms, id)`,
		`CREATE TABLE files (
		id            TEXT PRIMARY KEY,
		account       TEXT NOT NULL,
		workspace     TEXT NOT NULL,
		name          TEXT NOT NULL,
		bytes         BIGINT NOT NULL,
		sha256        TEXT NOT NULL,
		created_at_ms BIGINT NOT NULL,
		purpose       TEXT NOT NULL,
		source        TEXT NOT NULL
	)`,
		`CREATE INDEX files_by_scope ON files (account, workspace, created_at_ms, id)`,
		`CREATE TABLE usage_events (
		account        TEXT NOT NULL,
		workspace      TEXT NOT NULL,
		id             TEXT NOT NULL,
		container_id   TEXT NOT NULL,
		at_ms          BIGINT NOT NULL,
		day            TEXT NOT NULL,
		kind           TEXT NOT NULL,
		metered_ms     BIGINT NOT NULL,
		billed_ms      BIGINT NOT NULL,
		cost_micro_usd BIGINT NOT NULL,
		PRIMARY KEY (account, workspace, id)
	)`,
		`CREATE INDEX usage_by_scope_time ON usage_events (account, workspace, at_ms)`},
	// 2: jsrun's single-use continuation claims (POST /api/v1/eval), one
	// row per resumed token's nonce, kept until expires_at_ms.
	{`CREATE TABLE continuation_claims (
		id            TEXT PRIMARY KEY,
		used_at_ms    BIGINT NOT NULL,
		expires_at_ms BIGINT NOT NULL
	)`,
		`CREATE INDEX continuation_claims_by_expiry ON continuation_claims (expires_at_ms)`},
	// 3: each workspace's guardrails (a JSON list, guard.Guardrail) and
	// the prompt-injection detections recorded with requests, by request
	// id (what request logs will show).
	{`CREATE TABLE guardrails (
		account       TEXT NOT NULL,
		workspace     TEXT NOT NULL,
		config        TEXT NOT NULL,
		updated_at_ms BIGINT NOT NULL,
		PRIMARY KEY (account, workspace)
	)`,
		`CREATE TABLE guard_detections (
		account    TEXT NOT NULL,
		workspace  TEXT NOT NULL,
		request_id TEXT NOT NULL,
		seq        BIGINT NOT NULL,
		at_ms      BIGINT NOT NULL,
		api        TEXT NOT NULL,
		action     TEXT NOT NULL,
		guardrail  TEXT NOT NULL,
		rule       TEXT NOT NULL,
		technique  TEXT NOT NULL,
		via        TEXT NOT NULL,
		location   TEXT NOT NULL,
		start_byte BIGINT NOT NULL,
		end_byte   BIGINT NOT NULL,
		excerpt    TEXT NOT NULL,
		detector   TEXT NOT NULL,
		PRIMARY KEY (account, workspace, request_id, seq)
	)`,
		`CREATE INDEX guard_detections_by_time ON guard_detections (account, workspace, at_ms)`},
	// 4: request logs (store.Logs): each workspace's settings, and one
	// row per gateway request of a workspace that turned them on, its
	// detail as JSON in body.
	{`CREATE TABLE log_settings (
		account          TEXT NOT NULL,
		workspace        TEXT NOT NULL,
		enabled          BIGINT NOT NULL,
		retention_days   BIGINT NOT NULL,
		max_record_bytes BIGINT NOT NULL,
		updated_at_ms    BIGINT NOT NULL,
		PRIMARY KEY (account, workspace)
	)`,
		`CREATE TABLE request_logs (
		id             TEXT PRIMARY KEY,
		account        TEXT NOT NULL,
		workspace      TEXT NOT NULL,
		request_id     TEXT NOT NULL,
		created_at_ms  BIGINT NOT NULL,
		api            TEXT NOT NULL,
		model          TEXT NOT NULL,
		status         TEXT NOT NULL,
		http_status    BIGINT NOT NULL,
		duration_ms    BIGINT NOT NULL,
		container_id   TEXT NOT NULL,
		input_tokens   BIGINT NOT NULL,
		output_tokens  BIGINT NOT NULL,
		cost_micro_usd BIGINT NOT NULL,
		tool_calls     BIGINT NOT NULL,
		truncated      BIGINT NOT NULL,
		user_agent     TEXT NOT NULL,
		body           TEXT NOT NULL
	)`,
		`CREATE INDEX request_logs_by_scope ON request_logs (account, workspace, created_at_ms, id)`,
		`CREATE INDEX request_logs_by_time ON request_logs (created_at_ms)`},
	// 5: the replicas and where each awake container is (routing).
	{`CREATE TABLE nodes (
		id              TEXT PRIMARY KEY,
		url             TEXT NOT NULL,
		heartbeat_at_ms BIGINT NOT NULL
	)`,
		`ALTER TABLE containers ADD COLUMN node TEXT NOT NULL DEFAULT ''`},
}
