// The docs UI's page script (index.j2 holds no script: its Content-Security-Policy runs only
// files served from here). Swagger UI with two plugins: FoldedFilters and StoredAccessTokensOnly.

// The list language's operator filters (`price_cents[gte]`, ...: most of a list's parameters)
// fold behind one button; one given a value stays shown. The contract still declares each, for
// validation and generated clients.
const OPERATOR_FILTER = /\[(ne|lt|lte|gt|gte|in|contains)\]$/
function FoldedFilters(system) {
  const React = system.React
  const h = React.createElement
  function hasValue(props, parameter) {
    const value = props.specSelectors
      .parameterWithMetaByIdentity(props.pathMethod, parameter)
      .get("value")
    return value !== undefined && value !== "" && !(value && value.size === 0)
  }
  function FoldedParameters(Original) {
    return function (props) {
      const [unfolded, setUnfolded] = React.useState(false)
      const filters = props.parameters.filter((p) => OPERATOR_FILTER.test(p.get("name")))
      if (filters.size === 0) {
        return h(Original, props)
      }
      const shown = unfolded
        ? props.parameters
        : props.parameters.filter(
            (p) => !OPERATOR_FILTER.test(p.get("name")) || hasValue(props, p)
          )
      const label = unfolded
        ? "Hide the operator filters"
        : `Show the ${filters.size} operator filters (field[ne], [lt], [gte], [in], [contains], ...)`
      return h(
        "div",
        null,
        h(Original, Object.assign({}, props, { parameters: shown })),
        h(
          "div",
          { className: "folded-filters" },
          h(
            "button",
            { type: "button", className: "btn", onClick: () => setUnfolded(!unfolded) },
            label
          )
        )
      )
    }
  }
  return { wrapComponents: { parameters: FoldedParameters } }
}

// persistAuthorization keeps Swagger UI's whole authorization state in localStorage: the
// password flow's username and password, its refresh token, an API key. What is kept across a
// reload is only each access token (an OAuth2 flow's, or a bearer token typed in): short-lived,
// and what "Try it out" sends. The rest is written over as soon as Swagger UI writes it.
const STORED = "authorized"
function accessTokensOnly(authorized) {
  const kept = {}
  for (const [name, auth] of Object.entries(authorized || {})) {
    const type = auth.schema && auth.schema.type
    const token = auth.token && auth.token.access_token
    if (type === "oauth2" && token) {
      kept[name] = {
        name: auth.name,
        schema: auth.schema,
        scopes: auth.scopes,
        token: { access_token: token, token_type: auth.token.token_type },
      }
    } else if (type === "http" && auth.schema.scheme === "bearer" && auth.value) {
      kept[name] = { name: auth.name, schema: auth.schema, value: auth.value }
    }
  }
  return kept
}
function StoredAccessTokensOnly() {
  return {
    statePlugins: {
      auth: {
        wrapActions: {
          persistAuthorizationIfNeeded: (original) => () => {
            const result = original()
            const stored = localStorage.getItem(STORED)
            if (stored !== null) {
              localStorage.setItem(STORED, JSON.stringify(accessTokensOnly(JSON.parse(stored))))
            }
            return result
          },
        },
      },
    },
  }
}

window.onload = function () {
  // What an earlier page may have kept (a password, a refresh token) goes before it is read.
  const stored = localStorage.getItem(STORED)
  if (stored !== null) {
    localStorage.setItem(STORED, JSON.stringify(accessTokensOnly(JSON.parse(stored))))
  }
  const options = JSON.parse(document.getElementById("swagger-ui-options").textContent)
  const config = {
    url: options.url,
    validatorUrl: options.validatorUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl, FoldedFilters, StoredAccessTokensOnly],
    layout: "StandaloneLayout",
  }
  if (options.urls) config.urls = options.urls
  if (options.configUrl) config.configUrl = options.configUrl
  const ui = SwaggerUIBundle(config)
  if (options.initOAuth) ui.initOAuth(options.initOAuth)
  window.ui = ui
}
