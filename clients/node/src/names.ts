// The names the client takes from the proto, in one place: the service, the
// enum values it matches on, and the request type of each call. When the
// proto renames one of them, this file is the only one to change.

/** The package and service in proto/leasehold/v1/leasehold.proto. */
export const PROTO_FILE = 'leasehold/v1/leasehold.proto';
export const PROTO_PACKAGE = ['leasehold', 'v1'] as const;
export const SERVICE = 'Leasehold';

/** LeaseStatus.State values, as proto-loader spells them (enums: String). */
export const STATE = {
  ALIVE: 'ALIVE',
  LOST: 'LOST',
  UNCONFIRMED: 'UNCONFIRMED',
  REJECTED: 'REJECTED',
} as const;

/** LossReason values, mapped to the client's own names (which stay unprefixed). */
export const LOSS_REASON: Record<string, 'EXPIRED' | 'NOT_OWNER' | 'STORE_LOST' | 'REVOKED'> = {
  EXPIRED: 'EXPIRED',
  NOT_OWNER: 'NOT_OWNER',
  STORE_LOST: 'STORE_LOST',
  REVOKED: 'REVOKED',
};
