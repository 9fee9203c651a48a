//! The [`Instrumented`] decorator's tracing: one `ttl_storage` span per
//! operation with the fields `store`, `op`, `key` and `outcome`, an error
//! event inside the span of a failed operation, and never the value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    fmt::Debug,
    sync::{Arc, Mutex},
};

use storage_mem::MemStorage;
use tracing::{
    Event, Id, Subscriber,
    field::{Field, Visit},
    span::{Attributes, Record},
};
use tracing_subscriber::{
    Layer,
    layer::{Context, SubscriberExt},
    registry::LookupSpan,
};
use ttl_storage::{Instrumented, Key, MAX_VALUE_LEN, Ttl, TtlStorage};

/// A closed span (or an event): its name and fields, as text.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    fields: HashMap<String, String>,
    /// For an event: the fields of the span it happened in.
    parent: Option<HashMap<String, String>>,
}

/// Collects every closed span and every event.
#[derive(Clone, Default)]
struct Recorder {
    spans: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Mutex<Vec<Seen>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_string(),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        ctx.span(id).unwrap().extensions_mut().insert(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut extensions = span.extensions_mut();
        let seen = extensions.get_mut::<Seen>().unwrap();
        values.record(&mut Fields(&mut seen.fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: event.metadata().name().to_string(),
            ..Seen::default()
        };
        event.record(&mut Fields(&mut seen.fields));
        seen.parent = ctx
            .event_span(event)
            .and_then(|span| span.extensions().get::<Seen>().map(|s| s.fields.clone()));
        self.events.lock().unwrap().push(seen);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        if let Some(seen) = span.extensions().get::<Seen>() {
            self.spans.lock().unwrap().push(seen.clone());
        }
    }
}

fn field<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.fields
        .get(name)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no field {name} in {seen:?}"))
}

#[tokio::test(flavor = "current_thread")]
async fn each_operation_has_a_span_with_its_outcome_and_no_value() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let storage = Instrumented::new(MemStorage::new(), "mem");
    let key = Key::new("leader").unwrap();
    let ttl = Ttl::from_secs(20).unwrap();
    assert!(
        storage
            .insert_if_not_exists(&key, b"secret-value", ttl)
            .await
            .unwrap()
    );
    assert!(
        !storage
            .insert_if_not_exists(&key, b"secret-value", ttl)
            .await
            .unwrap()
    );
    assert_eq!(
        storage.get(&key).await.unwrap(),
        Some(b"secret-value".to_vec())
    );
    assert!(
        storage
            .compare_and_delete(&key, b"secret-value")
            .await
            .unwrap()
    );
    assert_eq!(storage.get(&key).await.unwrap(), None);
    let too_long = vec![b'x'; MAX_VALUE_LEN + 1];
    let err = storage
        .insert_if_not_exists(&key, &too_long, ttl)
        .await
        .unwrap_err();

    let spans = recorder.spans.lock().unwrap().clone();
    let ops: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| {
            assert_eq!(s.name, "ttl_storage");
            assert_eq!(field(s, "store"), "mem");
            assert_eq!(field(s, "key"), "leader");
            (field(s, "op"), field(s, "outcome"))
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("insert_if_not_exists", "applied"),
            ("insert_if_not_exists", "not_applied"),
            ("get", "found"),
            ("compare_and_delete", "applied"),
            ("get", "absent"),
            ("insert_if_not_exists", "error"),
        ]
    );

    // The failure is logged once, inside the failed operation's span.
    let events = recorder.events.lock().unwrap().clone();
    let failures: Vec<&Seen> = events
        .iter()
        .filter(|e| e.fields.get("message").map(String::as_str) == Some("storage operation failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{events:?}");
    assert_eq!(field(failures[0], "kind"), "permanent");
    assert_eq!(field(failures[0], "error"), err.to_string());
    let parent = failures[0].parent.as_ref().expect("the event is in a span");
    assert_eq!(
        parent.get("op").map(String::as_str),
        Some("insert_if_not_exists")
    );
    assert_eq!(parent.get("outcome").map(String::as_str), Some("error"));

    // Values are never logged.
    for seen in spans.iter().chain(events.iter()) {
        for value in seen.fields.values() {
            assert!(!value.contains("secret-value"), "{seen:?}");
        }
    }
}
