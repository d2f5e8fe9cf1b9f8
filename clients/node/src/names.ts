// The names the client takes from the proto, in one place: the service and
// the enum values it matches on. When the proto renames one of them, this
// file is the only one to change (requests and answers are plain objects
// with the proto's field names, as proto-loader reads the shipped proto).

/** The package and service in proto/leasehold/v1/leasehold.proto. */
export const PROTO_FILE = 'leasehold/v1/leasehold.proto';
export const PROTO_PACKAGE = ['leasehold', 'v1'] as const;
export const SERVICE = 'LeaseholdService';

/** LeaseStatus.State values, as proto-loader spells them (enums: String). */
export const STATE = {
  ALIVE: 'STATE_ALIVE',
  LOST: 'STATE_LOST',
  UNCONFIRMED: 'STATE_UNCONFIRMED',
  REJECTED: 'STATE_REJECTED',
} as const;

/** LossReason values, mapped to the client's own names (which stay unprefixed: EXPIRED, ...). */
export const LOSS_REASON: Record<string, 'EXPIRED' | 'NOT_OWNER' | 'STORE_LOST' | 'REVOKED'> = {
  LOSS_REASON_EXPIRED: 'EXPIRED',
  LOSS_REASON_NOT_OWNER: 'NOT_OWNER',
  LOSS_REASON_STORE_LOST: 'STORE_LOST',
  LOSS_REASON_REVOKED: 'REVOKED',
};
