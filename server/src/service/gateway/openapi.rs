//! The OpenAPI 3 document of the JSON API (`GET /v1/openapi.json`,
//! checked in as `docs/openapi.json`), generated from the proto's
//! descriptor set: each route's request and response messages, every
//! message they reach, their fields' JSON names and types and the proto's
//! comments. So the document cannot drift from the API: a field added to
//! the proto is in it at the next build, and the test below fails until
//! the checked-in copy is regenerated.

use std::{collections::BTreeMap, sync::OnceLock};

use prost::Message as _;
use prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
};
use serde_json::{json, Map, Value};

use super::ROUTES;

/// The package of the API's messages.
const PACKAGE: &str = "leasehold.v1";

/// The document, generated once (the checked-in `docs/openapi.json` is
/// the same bytes: see the test).
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(generate)
}

/// Generates the document from the embedded descriptor set.
pub fn generate() -> String {
    let set = FileDescriptorSet::decode(crate::proto::FILE_DESCRIPTOR_SET)
        .expect("the embedded descriptor set decodes");
    let file = set
        .file
        .iter()
        .find(|f| f.package() == PACKAGE)
        .expect("the descriptor set has the API's file");
    let api = Api::of(file);
    let mut paths = Map::new();
    let mut schemas = BTreeMap::new();
    for route in ROUTES {
        let operation = match route.rpc {
            Some(rpc) => api.unary(rpc, &mut schemas),
            None => match route.path {
                "/v1/status" => status_operation(),
                "/v1/openapi.json" => json!({
                    "operationId": "OpenApi",
                    "summary": "This document.",
                    "security": [],
                    "responses": { "200": { "description": "The OpenAPI document.",
                        "content": { "application/json": {} } } },
                }),
                _ => json!({
                    "summary": "The status page (HTML). Holds no data: it asks /v1/list and \
                                /v1/status with the user's token, so it is served without one.",
                    "security": [],
                    "responses": { "200": { "description": "The page.",
                        "content": { "text/html": {} } } },
                }),
            },
        };
        paths.insert(
            route.path.to_owned(),
            json!({ route.method.to_ascii_lowercase(): operation }),
        );
    }
    schemas.insert("Error".to_owned(), error_schema());
    schemas.insert("Status".to_owned(), status_schema());
    let document = json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Leasehold HTTP/JSON API",
            "version": "v1",
            "description": "The unary calls of leasehold.v1.LeaseholdService over HTTP/1.1 or \
                HTTP/2, each a POST of its request message in the proto3 JSON mapping \
                (lowerCamelCase names, the proto names accepted too; 64-bit integers as \
                strings, accepted as numbers too), answered with its response message the \
                same way. Same authentication (Authorization: Bearer <token>, or a client \
                certificate), tenants, caps and limits as the gRPC port; a refusal carries \
                the gRPC code's name and the google.rpc.ErrorInfo reason and metadata of the \
                gRPC status (see docs/http-api.md). Generated from the proto.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
        // Without --auth-file no credential is needed: either is fine.
        "security": [ { "bearer": [] }, {} ],
    });
    let mut text = serde_json::to_string_pretty(&document).expect("a JSON value encodes");
    text.push('\n');
    text
}

/// The API's file: its messages, enums and comments by descriptor path.
struct Api<'a> {
    file: &'a FileDescriptorProto,
    messages: BTreeMap<String, (&'a DescriptorProto, Vec<i32>)>,
    enums: BTreeMap<String, (&'a EnumDescriptorProto, Vec<i32>)>,
    comments: BTreeMap<Vec<i32>, String>,
}

impl<'a> Api<'a> {
    fn of(file: &'a FileDescriptorProto) -> Self {
        let mut api = Api {
            file,
            messages: BTreeMap::new(),
            enums: BTreeMap::new(),
            comments: BTreeMap::new(),
        };
        for (i, message) in file.message_type.iter().enumerate() {
            api.add_message(&format!(".{PACKAGE}"), message, vec![4, index(i)]);
        }
        for (i, e) in file.enum_type.iter().enumerate() {
            api.enums
                .insert(format!(".{PACKAGE}.{}", e.name()), (e, vec![5, index(i)]));
        }
        if let Some(info) = &file.source_code_info {
            for location in &info.location {
                let comment = location.leading_comments();
                if !comment.trim().is_empty() {
                    api.comments.insert(location.path.clone(), tidy(comment));
                }
            }
        }
        api
    }

    fn add_message(&mut self, scope: &str, message: &'a DescriptorProto, path: Vec<i32>) {
        let name = format!("{scope}.{}", message.name());
        for (i, nested) in message.nested_type.iter().enumerate() {
            let mut nested_path = path.clone();
            nested_path.extend([3, index(i)]);
            self.add_message(&name, nested, nested_path);
        }
        for (i, e) in message.enum_type.iter().enumerate() {
            let mut enum_path = path.clone();
            enum_path.extend([4, index(i)]);
            self.enums
                .insert(format!("{name}.{}", e.name()), (e, enum_path));
        }
        self.messages.insert(name, (message, path));
    }

    fn comment(&self, path: &[i32]) -> String {
        self.comments.get(path).cloned().unwrap_or_default()
    }

    /// The operation of the unary RPC `rpc`; adds the schemas it reaches.
    fn unary(&self, rpc: &str, schemas: &mut BTreeMap<String, Value>) -> Value {
        let (s, service) = self
            .file
            .service
            .iter()
            .enumerate()
            .next()
            .expect("the API has its service");
        let (m, method) = service
            .method
            .iter()
            .enumerate()
            .find(|(_, m)| m.name() == rpc)
            .unwrap_or_else(|| panic!("the service has no method {rpc}"));
        let description = self.comment(&[6, index(s), 2, index(m)]);
        let summary = description
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .replace('\n', " ");
        let request = self.schema_ref(method.input_type(), schemas);
        let response = self.schema_ref(method.output_type(), schemas);
        json!({
            "operationId": rpc,
            "summary": summary,
            "description": description,
            "requestBody": {
                "required": true,
                "content": { "application/json": { "schema": request } },
            },
            "responses": {
                "200": {
                    "description": format!("{rpc}'s answer."),
                    "content": { "application/json": { "schema": response } },
                },
                "default": error_response(),
            },
        })
    }

    /// A `$ref` to the message `type_name` (`.leasehold.v1.X`), adding its
    /// schema and those of the messages and enums it reaches.
    fn schema_ref(&self, type_name: &str, schemas: &mut BTreeMap<String, Value>) -> Value {
        let short = type_name.trim_start_matches('.').to_owned();
        let reference = json!({ "$ref": format!("#/components/schemas/{short}") });
        if schemas.contains_key(&short) {
            return reference;
        }
        if let Some((e, path)) = self.enums.get(type_name) {
            let values: Vec<&str> = e
                .value
                .iter()
                .map(prost_types::EnumValueDescriptorProto::name)
                .collect();
            schemas.insert(
                short,
                json!({ "type": "string", "enum": values, "description": self.comment(path) }),
            );
            return reference;
        }
        let (message, path) = self
            .messages
            .get(type_name)
            .unwrap_or_else(|| panic!("no message {type_name} in the API"));
        // Inserted before its fields are walked: a message that reaches
        // itself ends there.
        schemas.insert(short.clone(), Value::Null);
        let mut properties = Map::new();
        for (i, field) in message.field.iter().enumerate() {
            let mut field_path = path.clone();
            field_path.extend([2, index(i)]);
            let mut schema = self.field_schema(field, schemas);
            let comment = self.comment(&field_path);
            if let (Some(object), false) = (schema.as_object_mut(), comment.is_empty()) {
                if object.contains_key("$ref") {
                    // OpenAPI 3.0 ignores siblings of a $ref.
                    schema = json!({ "allOf": [schema], "description": comment });
                } else {
                    object.insert("description".into(), Value::String(comment));
                }
            }
            properties.insert(json_name(field), schema);
        }
        schemas.insert(
            short,
            json!({
                "type": "object",
                "description": self.comment(path),
                "properties": properties,
            }),
        );
        reference
    }

    fn field_schema(
        &self,
        field: &prost_types::FieldDescriptorProto,
        schemas: &mut BTreeMap<String, Value>,
    ) -> Value {
        let single = match field.r#type() {
            Type::String => json!({ "type": "string" }),
            Type::Bytes => json!({ "type": "string", "format": "byte" }),
            Type::Bool => json!({ "type": "boolean" }),
            Type::Int32 | Type::Sint32 | Type::Sfixed32 => {
                json!({ "type": "integer", "format": "int32" })
            }
            Type::Uint32 | Type::Fixed32 => {
                json!({ "type": "integer", "format": "int64", "minimum": 0 })
            }
            // The proto3 JSON mapping writes 64-bit integers as strings
            // (a JSON number loses precision past 2^53); it reads either.
            Type::Int64 | Type::Sint64 | Type::Sfixed64 => {
                json!({ "type": "string", "format": "int64" })
            }
            Type::Uint64 | Type::Fixed64 => json!({ "type": "string", "format": "uint64" }),
            Type::Double | Type::Float => json!({ "type": "number" }),
            Type::Enum | Type::Message | Type::Group => self.map_or_ref(field.type_name(), schemas),
        };
        if field.label() == Label::Repeated && single.get("additionalProperties").is_none() {
            json!({ "type": "array", "items": single })
        } else {
            single
        }
    }

    /// A message field's schema: an object for a map field (its entry
    /// message), else a `$ref`.
    fn map_or_ref(&self, type_name: &str, schemas: &mut BTreeMap<String, Value>) -> Value {
        if let Some((entry, _)) = self.messages.get(type_name) {
            if entry
                .options
                .as_ref()
                .is_some_and(prost_types::MessageOptions::map_entry)
            {
                let value = &entry.field[1];
                return json!({
                    "type": "object",
                    "additionalProperties": self.field_schema(value, schemas),
                });
            }
        }
        self.schema_ref(type_name, schemas)
    }
}

/// A descriptor index as a path element.
fn index(i: usize) -> i32 {
    i32::try_from(i).expect("fewer than 2^31 elements")
}

/// The field's JSON name (`ttlMs`), as the proto3 JSON mapping writes it.
fn json_name(field: &prost_types::FieldDescriptorProto) -> String {
    if let Some(name) = &field.json_name {
        return name.clone();
    }
    let mut out = String::new();
    let mut upper = false;
    for c in field.name().chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A comment without the space after each `//` and its trailing newline.
fn tidy(comment: &str) -> String {
    comment
        .lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

fn error_response() -> Value {
    json!({
        "description": "A refusal: the gRPC status of the same call, its code mapped to an \
                        HTTP status (docs/http-api.md).",
        "content": { "application/json": {
            "schema": { "$ref": "#/components/schemas/Error" } } },
    })
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "A refusal: what the gRPC status of the same call carries.",
        "properties": {
            "code": { "type": "string", "description":
                "The gRPC code's name (google.rpc.Code): ABORTED, NOT_FOUND..." },
            "message": { "type": "string", "description":
                "For people; may change between versions." },
            "reason": { "type": "string", "description":
                "The google.rpc.ErrorInfo reason (the proto's \"Errors\" section): stable, \
                 for programs." },
            "metadata": { "type": "object", "additionalProperties": { "type": "string" },
                "description": "The ErrorInfo metadata: the refusal's facts, every value a \
                                string." },
            "retryDelayMs": { "type": "integer", "format": "int64", "description":
                "The google.rpc.RetryInfo delay in milliseconds; 0 without one. Also in \
                 Retry-After (seconds) on a 429 or 503." },
            "place": { "type": "string", "description":
                "The place kept in line (keep_place), where the gRPC status carries it in \
                 the leasehold-place metadata." },
            "routes": { "type": "array", "items": { "type": "string" }, "description":
                "On a 404 for an unknown route: every route." },
        },
        "required": ["code", "message", "reason", "metadata", "retryDelayMs"],
    })
}

fn status_operation() -> Value {
    json!({
        "operationId": "Status",
        "summary": "The store's health, the broker's version and the newest leases lost \
                    (the caller's tenant's; every tenant's for an administrator).",
        "responses": {
            "200": { "description": "The status.", "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/Status" } } } },
            "default": error_response(),
        },
    })
}

fn status_schema() -> Value {
    json!({
        "type": "object",
        "description": "What the status page shows beside the listing.",
        "properties": {
            "version": { "type": "string", "description": "The broker's version." },
            "store": { "type": "object", "properties": {
                "serving": { "type": "boolean", "description":
                    "Whether the broker is serving (its gRPC health status)." },
                "message": { "type": "string", "description":
                    "When not serving: why, as far as the broker knows; empty when serving." },
            } },
            "tenant": { "type": "string", "description": "The caller's tenant." },
            "admin": { "type": "boolean", "description":
                "Whether the caller has the admin permission (losses of every tenant)." },
            "recentLosses": { "type": "array", "description":
                "The newest leases this broker replica learnt were lost (at most 100), \
                 newest first.",
                "items": { "type": "object", "properties": {
                    "name": { "type": "string", "description":
                        "The lock name, as its holders name it." },
                    "tenant": { "type": "string" },
                    "reason": { "type": "string",
                        "enum": ["expired", "not_owner", "store_lost", "revoked"],
                        "description": "As lease_lost_total's reason label." },
                    "atUnixMs": { "type": "string", "format": "uint64", "description":
                        "When this replica learnt it, in milliseconds since the Unix epoch." },
                } } },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variable that rewrites the checked-in document.
    const REWRITE: &str = "LEASEHOLD_WRITE_OPENAPI";

    #[test]
    fn the_checked_in_document_is_the_generated_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
        let generated = generate();
        if std::env::var_os(REWRITE).is_some() {
            std::fs::write(path, &generated).expect("write docs/openapi.json");
            return;
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "docs/openapi.json is not what the proto makes of it now: regenerate it with \
             `{REWRITE}=1 cargo test -p leasehold-server openapi` and commit it"
        );
    }

    #[test]
    fn routes_name_their_messages_and_fields_in_json() {
        let document: Value = serde_json::from_str(&generate()).unwrap();
        let acquire = &document["paths"]["/v1/acquire"]["post"];
        assert_eq!(
            acquire["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/leasehold.v1.AcquireRequest"
        );
        let schemas = &document["components"]["schemas"];
        let request = &schemas["leasehold.v1.AcquireRequest"]["properties"];
        assert_eq!(request["ttlMs"]["type"], "string");
        assert!(request["waitTimeoutMs"]["description"]
            .as_str()
            .unwrap()
            .contains("How long to wait"));
        assert_eq!(
            schemas["leasehold.v1.ListResponse"]["properties"]["locks"]["items"]["$ref"],
            "#/components/schemas/leasehold.v1.ListedLock"
        );
        assert!(document["paths"]["/v1/status"]["get"].is_object());
    }
}
