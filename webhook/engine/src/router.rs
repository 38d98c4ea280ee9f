//! Routing an object between versions: hub⇄spoke directly, spoke→spoke through the hub.

use crate::convert::{ConvertError, Direction};
use crate::plan::Plan;
use crate::value::{self, JsonValueMutTrait, JsonValueTrait, Value};

impl Plan {
    /// Converts one object (apiVersion `<group>/<version>`) to `desired_api_version`;
    /// spoke→spoke goes through the hub.
    pub fn convert(
        &self,
        obj: &serde_json::Value,
        desired_api_version: &str,
    ) -> Result<serde_json::Value, ConvertError> {
        let v = value::from_serde(obj);
        self.convert_value(&v, desired_api_version).map(|out| value::to_serde(&out))
    }

    /// [`Plan::convert`] on the engine's own value type (the ConversionReview path).
    pub fn convert_value(&self, obj: &Value, desired_api_version: &str) -> Result<Value, ConvertError> {
        self.convert_noting_loss(obj, desired_api_version).map(|(v, _)| v)
    }

    /// [`Plan::convert_value`], and whether an acknowledged loss dropped data on the way
    /// (`ScopePlan::run_noting_loss`).
    pub fn convert_noting_loss(
        &self,
        obj: &Value,
        desired_api_version: &str,
    ) -> Result<(Value, bool), ConvertError> {
        let (mut out, lost) = self.convert_bare(obj, desired_api_version)?;
        // Server-side apply and Flux send fragments without metadata (kubernetes/kubernetes
        // #117356), and the apiserver refuses a converted object without it ("missing
        // metadata in converted object"): it then copies the original's metadata in itself.
        if let Some(o) = out.as_object_mut()
            && o.get(&"metadata").is_none_or(|m| m.is_null())
        {
            o.insert("metadata", Value::new_object());
        }
        Ok((out, lost))
    }

    fn convert_bare(&self, obj: &Value, desired_api_version: &str) -> Result<(Value, bool), ConvertError> {
        if !obj.is_object() {
            return Err(ConvertError::object(
                obj,
                format!("is not an object (got {})", value::type_name(obj)),
            ));
        }
        // The apiserver sends one path's reviews for every kind wired to it (an XRD's XR and
        // claim CRDs); an object of another kind means the wiring is wrong, and converting
        // it by this target's rules would corrupt it.
        if let Some(kind) = obj.get("kind").and_then(|k| k.as_str())
            && !self.accepts_kind(kind)
        {
            return Err(ConvertError::object(
                obj,
                format!(
                    "kind {kind} is not a kind of target {}: it converts {}; point the conversion of {kind}'s CRD at its own target's path",
                    self.target,
                    self.expected_kinds()
                ),
            ));
        }
        let from = match obj.get("apiVersion").and_then(|v| v.as_str()) {
            Some(av) => {
                self.version_of(av).map_err(|m| ConvertError::object(obj, format!("apiVersion: {m}")))?
            }
            None => {
                return Err(ConvertError::object(
                    obj,
                    "apiVersion is missing; cannot tell which version it is",
                ));
            }
        };
        let to = self
            .version_of(desired_api_version)
            .map_err(|m| ConvertError::object(obj, format!("desiredAPIVersion: {m}")))?;
        let from = from.to_string();
        if from == to {
            return Ok((obj.clone(), false));
        }
        let hub = self.hub_version.as_str();
        if from == hub {
            return self.step(obj, to, Direction::HubToSpoke);
        }
        let (at_hub, lost) = self.step(obj, &from, Direction::SpokeToHub)?;
        if to == hub {
            Ok((at_hub, lost))
        } else {
            self.step(&at_hub, to, Direction::HubToSpoke).map(|(v, more)| (v, lost || more))
        }
    }

    /// The index in [`Plan::versions`] of the version an apiVersion names, when it is one of
    /// this plan's (its group, the hub or a spoke).
    pub fn version_index(&self, api_version: &str) -> Option<usize> {
        let (group, version) = api_version.split_once('/')?;
        if group != self.group {
            return None;
        }
        if version == self.hub_version {
            return Some(0);
        }
        self.spokes.iter().position(|s| s.version == version).map(|i| i + 1)
    }

    /// The version named by an apiVersion of this plan's group.
    fn version_of<'a>(&self, api_version: &'a str) -> Result<&'a str, String> {
        let Some((group, version)) = api_version.split_once('/') else {
            return Err(format!("{api_version:?} is not <group>/<version>"));
        };
        if group != self.group {
            return Err(format!("{api_version:?} is not in group {} of target {}", self.group, self.target));
        }
        if version != self.hub_version && self.spoke(version).is_none() {
            return Err(format!(
                "version {version} is neither the hub nor a spoke of target {} (versions: {})",
                self.target,
                self.versions().join(", ")
            ));
        }
        Ok(version)
    }

    /// One hop; `spoke` is the spoke end of the hop.
    fn step(&self, src: &Value, spoke: &str, dir: Direction) -> Result<(Value, bool), ConvertError> {
        let Some(sp) = self.spoke(spoke) else {
            return Err(ConvertError::object(src, format!("no spoke {spoke} in the plan")));
        };
        let mut dst = src.clone();
        let lost =
            sp.scope.run_noting_loss(dir, src, &mut dst).map_err(|e| ConvertError::from_op(src, spoke, e))?;
        let dest_version = match dir {
            Direction::HubToSpoke => spoke,
            Direction::SpokeToHub => self.hub_version.as_str(),
        };
        let api_version = format!("{}/{dest_version}", self.group);
        match dst.as_object_mut() {
            Some(o) => {
                o.insert("apiVersion", Value::from(api_version.as_str()));
                Ok((dst, lost))
            }
            None => Err(ConvertError::object(src, "a rule replaced the whole object with a non-object")),
        }
    }
}
