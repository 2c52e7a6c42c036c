// The API docs page: Swagger UI from this server (swagger-ui-bundle), reading this server's schema.
"use strict";
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
