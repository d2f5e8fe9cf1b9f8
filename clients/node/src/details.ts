// What a program reads of a refusal: the broker's status details. Every error
// status the broker sends carries, in its `grpc-status-details-bin` trailer,
// a google.rpc.Status whose details hold a google.rpc.ErrorInfo (domain
// "leasehold.v1": a stable reason code and the refusal's facts, every value a
// string, durations in milliseconds) and, where a retry may succeed after a
// known time, a google.rpc.RetryInfo. A Session stream's SessionError carries
// the same in its own fields (reason, metadata, retry_delay_ms). The client
// reads refusals from these, never from the message, which is for people.
//
// The google.rpc messages ship with the package (proto/google/rpc, copied
// from third_party/ by the build: googleapis' definitions, Apache-2.0) and
// are decoded with protobufjs, which @grpc/proto-loader already brings.
import { join } from 'node:path';
import * as protobuf from 'protobufjs';
import type * as grpc from '@grpc/grpc-js';

/** A refusal's reason code, facts and retry delay; empty when no broker explained the failure. */
export interface Detail {
  /** The broker's reason code (LOCK_HELD, BAD_ARGUMENT...); '' when none. */
  readonly reason: string;
  /** The refusal's facts (durations in milliseconds, as decimal strings). */
  readonly metadata: Readonly<Record<string, string>>;
  /** How long to wait before a retry may succeed, when the broker says; else null. */
  readonly retryAfterMs: number | null;
}

/** The ErrorInfo domain of the broker's refusals. */
export const DOMAIN = 'leasehold.v1';

/** The trailer that carries a status's details. */
const TRAILER = 'grpc-status-details-bin';

export const NO_DETAIL: Detail = Object.freeze({ reason: '', metadata: Object.freeze({}), retryAfterMs: null });

interface Types {
  Status: protobuf.Type;
  ErrorInfo: protobuf.Type;
  RetryInfo: protobuf.Type;
}
let types: Types | null = null;

function load(): Types {
  if (types) return types;
  const dir = join(__dirname, '..', 'proto', 'google', 'rpc');
  // google/protobuf/any.proto and duration.proto: protobufjs has them built in.
  const root = new protobuf.Root().loadSync([join(dir, 'status.proto'), join(dir, 'error_details.proto')], { keepCase: true });
  types = {
    Status: root.lookupType('google.rpc.Status'),
    ErrorInfo: root.lookupType('google.rpc.ErrorInfo'),
    RetryInfo: root.lookupType('google.rpc.RetryInfo'),
  };
  return types;
}

/** The ErrorInfo (of the broker's domain) and RetryInfo of a serialized google.rpc.Status. */
export function decodeStatusDetails(bytes: Uint8Array): Detail {
  try {
    const { Status, ErrorInfo, RetryInfo } = load();
    const status = Status.toObject(Status.decode(bytes), { defaults: true }) as { details: { type_url: string; value: Uint8Array }[] };
    let reason = '';
    let metadata: Record<string, string> = {};
    let retryAfterMs: number | null = null;
    for (const any of status.details) {
      const type = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
      if (type === 'google.rpc.ErrorInfo') {
        const info = ErrorInfo.toObject(ErrorInfo.decode(any.value), { defaults: true }) as { reason: string; domain: string; metadata: Record<string, string> };
        // Another domain's (a proxy's, say) is not the broker's word.
        if (info.domain === DOMAIN && !reason) {
          reason = info.reason;
          metadata = { ...info.metadata };
        }
      } else if (type === 'google.rpc.RetryInfo') {
        const retry = RetryInfo.toObject(RetryInfo.decode(any.value), { defaults: true, longs: Number }) as { retry_delay?: { seconds: number; nanos: number } };
        if (retry.retry_delay) retryAfterMs = retry.retry_delay.seconds * 1000 + Math.round(retry.retry_delay.nanos / 1e6);
      }
    }
    return { reason, metadata, retryAfterMs };
  } catch {
    return NO_DETAIL; // not a google.rpc.Status: nothing a program can read
  }
}

/** What a call's trailing metadata says in `grpc-status-details-bin`. */
export function detailFromMetadata(metadata: grpc.Metadata | undefined | null): Detail {
  const value = metadata?.get(TRAILER)?.[0];
  return value instanceof Uint8Array ? decodeStatusDetails(value) : NO_DETAIL;
}

/** What a Session stream's SessionError says (as proto-loader reads it: uint64 as a string). */
export function detailFromSessionError(error: { reason?: string; metadata?: Record<string, string>; retry_delay_ms?: string | number }): Detail {
  const retry = Number(error.retry_delay_ms ?? 0);
  return {
    reason: error.reason ?? '',
    metadata: { ...(error.metadata ?? {}) },
    retryAfterMs: retry > 0 ? retry : null,
  };
}
