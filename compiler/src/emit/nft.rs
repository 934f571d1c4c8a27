//! nftables.json emitter (being written).
pub fn emit(_plan: &crate::select::HostPlan) -> serde_json::Value {
    serde_json::json!({"nftables": []})
}
