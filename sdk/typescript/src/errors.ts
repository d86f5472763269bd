/**
 * Typed errors of the sbx API. Every error answer of sbxd (a non-2xx JSON
 * body `{"error":{"code","message"}}`, or an NDJSON `error` line of a long
 * operation or a streamed exec) becomes an instance of the class mapped to
 * its code, all subclasses of {@link SbxError}.
 *
 * @module
 */

/** The HTTP status that goes with each API error code (docs/api.md). */
export const codeStatus: Readonly<Record<string, number>> = {
  invalid_argument: 400,
  unauthorized: 401,
  forbidden: 403,
  sandbox_not_found: 404,
  checkpoint_not_found: 404,
  snapshot_not_found: 404,
  image_not_found: 404,
  file_not_found: 404,
  process_not_found: 404,
  not_found: 404,
  method_not_allowed: 405,
  name_taken: 409,
  conflict: 409,
  sandbox_has_volume: 409,
  too_large: 413,
  quota_exceeded: 429,
  capacity: 429,
  event_not_found: 404,
  key_not_found: 404,
  capture_limit: 507,
  port_timeout: 504,
  checkpoint_failed: 500,
  restore_failed: 500,
  snapshot_failed: 500,
  fork_failed: 500,
  suspend_failed: 500,
  resume_failed: 500,
  internal: 500,
  port_unreachable: 502,
  unavailable: 503,
};

/** Options of an {@link SbxError}. */
export interface SbxErrorInit {
  /** HTTP status of the answer; for an NDJSON error line, the status of its code. */
  status?: number;
  /** sbxd's request id (5xx answers), to find the cause in its log. */
  requestId?: string;
  /** True when the error came as an NDJSON `error` line, after a 200. */
  streamed?: boolean;
  cause?: unknown;
}

/** An error answer of the sbx API. */
export class SbxError extends Error {
  /** The API's stable snake_case code, e.g. `sandbox_not_found`. */
  readonly code: string;
  /** The HTTP status (for a streamed error, the status of its code). */
  readonly status: number;
  /** sbxd's request id, when it gave one. */
  readonly requestId?: string;
  /** True when the error came as an NDJSON `error` line. */
  readonly streamed: boolean;

  constructor(code: string, message: string, init: SbxErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = init.status ?? codeStatus[code] ?? 500;
    this.requestId = init.requestId;
    this.streamed = init.streamed ?? false;
  }

  override toString(): string {
    const rid = this.requestId ? ` (request ${this.requestId})` : '';
    return `${this.name}: ${this.code}: ${this.message}${rid}`;
  }
}

/** `invalid_argument` (400): a field is malformed; the message names it. */
export class InvalidArgumentError extends SbxError {}
/** `unauthorized` (401): missing or wrong API key. */
export class UnauthorizedError extends SbxError {}
/** Any 404; the specific not-found codes below extend it. Code `not_found`: no such route. */
export class NotFoundError extends SbxError {}
/** `sandbox_not_found` (404). */
export class SandboxNotFoundError extends NotFoundError {}
/** `checkpoint_not_found` (404). */
export class CheckpointNotFoundError extends NotFoundError {}
/** `snapshot_not_found` (404), also for an expired snapshot. */
export class SnapshotNotFoundError extends NotFoundError {}
/** `image_not_found` (404). */
export class ImageNotFoundError extends NotFoundError {}
/** `file_not_found` (404): the path does not exist inside the sandbox. */
export class FileNotFoundError extends NotFoundError {}
/** `process_not_found` (404): no process started by exec has that pid. */
export class ProcessNotFoundError extends NotFoundError {}
/** `event_not_found` (404): no pending event has that id. */
export class EventNotFoundError extends NotFoundError {}

/** `key_not_found` (404): no live API key has that id or name. */
export class KeyNotFoundError extends NotFoundError {}

/** `forbidden` (403): a tenant key asked for what only admin keys may do (managing keys). */
export class ForbiddenError extends SbxError {}
/** `method_not_allowed` (405). */
export class MethodNotAllowedError extends SbxError {}
/** `name_taken` (409): a sandbox with that name exists. */
export class NameTakenError extends SbxError {}
/** `conflict` (409): another operation runs, or the state forbids the request. */
export class ConflictError extends SbxError {}
/** `sandbox_has_volume` (409): snapshot, fork or suspend of a sandbox with volumes. */
export class SandboxHasVolumeError extends SbxError {}
/** `too_large` (413): request body over the limit. */
export class TooLargeError extends SbxError {}
/** `quota_exceeded` (429). */
export class QuotaExceededError extends SbxError {}
/** `capacity` (429): the host admits no more sandboxes or snapshots, or their CPUs or memory together would pass its overcommit limit; nothing was made. */
export class CapacityError extends SbxError {}
/** `capture_limit` (507): capturing the sandbox's disk (a checkpoint, snapshot, fork, suspend, or a diff of the live disk) passed a bound (time, bytes read, tree depth); nothing was recorded. */
export class CaptureLimitError extends SbxError {}
/** `checkpoint_failed` (500): nothing was recorded. */
export class CheckpointFailedError extends SbxError {}
/** `restore_failed` (500): the disk is as it was. */
export class RestoreFailedError extends SbxError {}
/** `snapshot_failed` (500): nothing was recorded; the source runs. */
export class SnapshotFailedError extends SbxError {}
/** `fork_failed` (500). */
export class ForkFailedError extends SbxError {}
/** `suspend_failed` (500): the sandbox runs as before. */
export class SuspendFailedError extends SbxError {}
/** `resume_failed` (500): the sandbox stays suspended. */
export class ResumeFailedError extends SbxError {}
/** `internal` (500). */
export class InternalError extends SbxError {}
/** `port_unreachable` (502): nothing listens on the sandbox port. */
export class PortUnreachableError extends SbxError {}
/** `unavailable` (503): sbxd or a dependency is not ready. */
export class UnavailableError extends SbxError {}
/** `port_timeout` (504): a request to a sandbox port got no connection or no response head within its deadline. */
export class PortTimeoutError extends SbxError {}

/** The class of each API error code. Unknown codes give a plain {@link SbxError}. */
export const errorClasses: Readonly<Record<string, new (code: string, message: string, init?: SbxErrorInit) => SbxError>> = {
  invalid_argument: InvalidArgumentError,
  unauthorized: UnauthorizedError,
  not_found: NotFoundError,
  sandbox_not_found: SandboxNotFoundError,
  checkpoint_not_found: CheckpointNotFoundError,
  snapshot_not_found: SnapshotNotFoundError,
  image_not_found: ImageNotFoundError,
  file_not_found: FileNotFoundError,
  process_not_found: ProcessNotFoundError,
  event_not_found: EventNotFoundError,
  key_not_found: KeyNotFoundError,
  forbidden: ForbiddenError,
  method_not_allowed: MethodNotAllowedError,
  name_taken: NameTakenError,
  conflict: ConflictError,
  sandbox_has_volume: SandboxHasVolumeError,
  too_large: TooLargeError,
  quota_exceeded: QuotaExceededError,
  capacity: CapacityError,
  capture_limit: CaptureLimitError,
  checkpoint_failed: CheckpointFailedError,
  restore_failed: RestoreFailedError,
  snapshot_failed: SnapshotFailedError,
  fork_failed: ForkFailedError,
  suspend_failed: SuspendFailedError,
  resume_failed: ResumeFailedError,
  internal: InternalError,
  port_unreachable: PortUnreachableError,
  port_timeout: PortTimeoutError,
  unavailable: UnavailableError,
};

/** Builds the typed error for an API code. */
export function errorFromCode(code: string, message: string, init: SbxErrorInit = {}): SbxError {
  const Cls = errorClasses[code] ?? SbxError;
  return new Cls(code, message, init);
}

/** The code sbxd would have sent for a status, for answers without an error body. */
export function codeOfStatus(status: number): string {
  switch (status) {
    case 400: return 'invalid_argument';
    case 401: return 'unauthorized';
    case 403: return 'forbidden';
    case 404: return 'not_found';
    case 405: return 'method_not_allowed';
    case 409: return 'conflict';
    case 413: return 'too_large';
    case 429: return 'quota_exceeded';
    case 502: return 'port_unreachable';
    case 503: return 'unavailable';
    case 504: return 'port_timeout';
    case 507: return 'capture_limit';
    default: return 'internal';
  }
}

/** sbxd could not be reached (socket missing, connection refused, reset). Not an API answer. */
export class SbxConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'SbxConnectionError';
  }
}

/** An answer that breaks the protocol (bad NDJSON, a stream without its final line). */
export class SbxProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SbxProtocolError';
  }
}
